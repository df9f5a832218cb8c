"""Error pages: JSON under /api/, HTML elsewhere."""

from django.shortcuts import render

from agentops.api.errors import api_not_found, api_server_error


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return render(request, "404.html", status=404)


def server_error(request):
    if request.path.startswith("/api/"):
        return api_server_error(request)
    return render(request, "500.html", status=500)
