"""Request middleware of the core."""

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
