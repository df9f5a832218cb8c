"""Errors raised by services: each carries the HTTP status and code the API answers
with, and a message written for the person who made the request."""


class ServiceError(Exception):
    status = 400
    code = "invalid"

    def __init__(self, message: str, *, details=None):
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidRequest(ServiceError):
    status = 400
    code = "invalid"


class Forbidden(ServiceError):
    status = 403
    code = "permission_denied"


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class TooManyRequests(ServiceError):
    """More work is waiting than the limit allows (a session's queue of messages)."""

    status = 429
    code = "too_many_requests"


class PaymentRequired(ServiceError):
    """A hard-limit budget is reached: the work would spend money the organization capped."""

    status = 402
    code = "budget_exceeded"
