"""Error pages: JSON under /api/, HTML elsewhere."""

from django.http import HttpResponseServerError
from django.shortcuts import render
from django.template.loader import render_to_string

from agentops.api.errors import api_not_found, api_server_error


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return render(request, "404.html", status=404)


def server_error(request):
    if request.path.startswith("/api/"):
        return api_server_error(request)
    # Without the request: its context processors read the database, which may be what
    # failed (a page during a PostgreSQL outage would fail again here).
    return HttpResponseServerError(render_to_string("500.html"))
