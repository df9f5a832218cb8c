"""API of GPU jobs under /api/v1/."""

from jobs.api.views import urlpatterns  # noqa: F401
