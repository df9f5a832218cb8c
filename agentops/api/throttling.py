"""Rate limits per API key and per signed-in user (rates in settings, from the environment).

The counts live in Redis (the cache). While Redis is unreachable, requests are let
through unlimited rather than refused: ingestion stores into PostgreSQL and must keep
accepting data when Redis alone is down (a warning says the limits are off)."""

import logging

from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

from agentops.models import ApiKey
from agentops.outages import log_degraded

logger = logging.getLogger(__name__)


class _RedisRateThrottle(SimpleRateThrottle):
    def allow_request(self, request, view):
        try:
            return super().allow_request(request, view)
        except RedisError as exc:
            log_degraded(logger, "rate limits are not applied", exc)
            return True


class ApiKeyRateThrottle(_RedisRateThrottle):
    scope = "api_key"

    def get_cache_key(self, request, view):
        if not isinstance(request.auth, ApiKey):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class UserRateThrottle(_RedisRateThrottle):
    scope = "user"

    def get_cache_key(self, request, view):
        if isinstance(request.auth, ApiKey) or not request.user or not request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}
