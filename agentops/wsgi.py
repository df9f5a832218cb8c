"""WSGI entry point (HTTP only; live pages need the ASGI application)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

from agentops.bootstrap import check_external_services  # noqa: E402

check_external_services("wsgi")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
