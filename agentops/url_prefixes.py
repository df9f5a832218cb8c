"""The URL prefixes every app mounts its routes under, defined once so that an
organization and a project are spelled, and their URL arguments named (``org_slug``,
``project_slug``), the same in every app: the scoped base classes
(agentops/api/base.py, agentops/pages.py) read those names."""

# The REST API, under /api/v1/ (agentops/urls.py).
API_ORGANIZATION = "organizations/<slug:org_slug>"
API_PROJECT = "projects/<slug:org_slug>/<slug:project_slug>"

# The pages.
PAGE_ORGANIZATION = "o/<slug:org_slug>"
PAGE_PROJECT = f"{PAGE_ORGANIZATION}/p/<slug:project_slug>"
