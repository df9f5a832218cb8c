"""Request middleware of the core."""

from csp.middleware import CSPMiddleware
from django.core.exceptions import DisallowedHost

from agentops.scoping import dangerously_unscoped


class AdminUnscopedMiddleware:
    """Staff in the Django admin (the cost-audit console) see every organization."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/admin/") and request.user.is_authenticated and request.user.is_staff:
            with dangerously_unscoped("staff console reads across organizations"):
                return self.get_response(request)
        return self.get_response(request)


class ContentSecurityPolicyMiddleware(CSPMiddleware):
    """django-csp's middleware (the policy is ``settings.CONTENT_SECURITY_POLICY``) with
    the page's own WebSocket origin added to ``connect-src``: live updates connect to
    ``ws(s)://<host>/ws/...``, which CSP Level 3 browsers count as ``'self'`` and older
    ones do not. The host is Django's validated one (``ALLOWED_HOSTS``); a request with a
    host Django refuses gets the policy without it."""

    def get_policy_parts(self, request, response, report_only=False):
        parts = super().get_policy_parts(request, response, report_only)
        if report_only:
            return parts
        try:
            host = request.get_host()
        except DisallowedHost:
            return parts
        origin = f"{'wss' if request.is_secure() else 'ws'}://{host}"
        update = dict(parts.update or {})
        update["connect-src"] = [*(update.get("connect-src") or []), origin]
        parts.update = update
        return parts
