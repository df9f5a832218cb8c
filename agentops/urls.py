from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from agentops import health
from agentops.url_prefixes import PAGE_ORGANIZATION, PAGE_PROJECT

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    # Browsers ask for /favicon.ico on pages that name no icon (Swagger UI's, a JSON answer).
    # Lazy: the static file's (hashed) name is known once the app serves, not at import.
    path("favicon.ico", RedirectView.as_view(url=lazy(static, str)("agentops/favicon.svg"), permanent=True)),
    path("admin/", admin.site.urls),
    path("accounts/", include("allauth.urls")),
    path("api/v1/otlp/", include("runs.api.urls_otlp")),
    path("api/v1/", include("agentops.api.urls")),
    path("api/v1/", include("billing.api.urls")),
    path("api/v1/", include("runs.api.urls")),
    path("api/v1/", include("evals.api.urls")),
    path("api/v1/", include("jobs.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file (?script=) rather than
    # inline, which the Content-Security-Policy would refuse.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("agentops.page_urls")),
    path(f"{PAGE_PROJECT}/runs/", include("runs.urls")),
    path(f"{PAGE_PROJECT}/evals/", include("evals.urls")),
    path(f"{PAGE_PROJECT}/jobs/", include("jobs.urls")),
    path(f"{PAGE_PROJECT}/assistant/", include("assistant.urls")),
    path(f"{PAGE_ORGANIZATION}/billing/", include("billing.urls")),
    path(f"{PAGE_ORGANIZATION}/compute/", include("jobs.org_urls")),
]

handler404 = "agentops.views.errors.not_found"
handler500 = "agentops.views.errors.server_error"
