"""Base classes of every API endpoint: they resolve the organization (and project)
from the URL, check the member's role or the API key's scopes against the endpoint's
permission map, and put the organization in scope for every query.

Endpoints declare ``permissions = {"GET": "project:read", "POST": "work:write"}``;
a method without an entry is refused. Subclasses never override ``get_queryset``
(checked when the class is defined): they set ``queryset`` and, where needed,
``filter_scoped_queryset``.
"""

from __future__ import annotations

from rest_framework import generics
from rest_framework.response import Response

from agentops.access import Access, resolve_member_project, resolve_organization, resolve_project
from agentops.errors import Forbidden, InvalidRequest
from agentops.jsonsafe import query_problem
from agentops.models import ApiKey
from agentops.scoping import TenantQuerySet, enter_organization_scope, reset_scope


class OrganizationEndpoint(generics.GenericAPIView):
    """An endpoint under ``/api/v1/organizations/{org_slug}/``."""

    permissions: dict[str, str] = {}
    allow_api_keys = False
    access: Access

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides get_queryset, which would bypass tenant scoping; "
                "set `queryset` and override filter_scoped_queryset instead"
            )

    def dispatch(self, request, *args, **kwargs):
        # Each request starts with no organization in scope; initial() sets it.
        with reset_scope():
            response = super().dispatch(request, *args, **kwargs)
        # DRF keeps the answer on the view (``self.response``), and while rendering puts
        # the answer in its own renderer context: two reference cycles through which
        # every answer, and what it was built from, outlived its request until the
        # garbage collector's next pass (docs/performance.md, "Answers freed when sent").
        # Nothing reads either after the answer is rendered.
        self.__dict__.pop("response", None)
        if isinstance(response, Response):
            response.add_post_render_callback(_forget_rendered_answer)
        return response

    def initial(self, request, *args, **kwargs):
        # First, before DRF reads ``?format=`` (an unknown one is its 404) or anything
        # is looked up: the answer is the same whoever asks.
        if problem := query_problem(request.query_params):
            raise InvalidRequest(problem)
        super().initial(request, *args, **kwargs)  # authentication, throttling
        api_key = request.auth if isinstance(request.auth, ApiKey) else None
        if api_key is not None and not self.allow_api_keys:
            raise Forbidden("this endpoint needs a signed-in user; API keys cannot use it")
        self.access = self.resolve_access(request, api_key, **kwargs)
        enter_organization_scope(self.access.organization)
        permission = self.permissions.get(request.method)
        if permission is None and request.method in ("HEAD", "OPTIONS"):
            permission = self.permissions.get("GET")
        if permission is None:
            raise Forbidden(f"{request.method} is not allowed here")
        self.access.require(permission, self.describe(request.method))
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            # Parse the body now, even where the endpoint reads none: a body the
            # parser refuses (too deep, too large, not storable) is always a 400,
            # before anything is looked up or done.
            request.data  # noqa: B018

    def resolve_access(self, request, api_key, **kwargs) -> Access:
        return resolve_organization(
            org_slug=kwargs["org_slug"], user=None if api_key else request.user, api_key=api_key
        )

    def describe(self, method: str) -> str:
        verb = {"GET": "read", "HEAD": "read", "OPTIONS": "read", "DELETE": "delete"}.get(method, "change")
        return f"{verb} {self.get_view_name().lower()}"

    def get_queryset(self):
        queryset = self.queryset
        if not isinstance(queryset, TenantQuerySet):
            raise TypeError(f"{type(self).__name__}.queryset must be a tenant-owned model's queryset")
        return self.filter_scoped_queryset(queryset.in_current_scope())

    def filter_scoped_queryset(self, queryset):
        return queryset

    @property
    def organization(self):
        return self.access.organization

    @property
    def client_ip(self) -> str | None:
        return self.request.META.get("REMOTE_ADDR")


def _forget_rendered_answer(response) -> None:
    context = getattr(response, "renderer_context", None)
    if context is not None:
        context.pop("response", None)


class ProjectEndpoint(OrganizationEndpoint):
    """An endpoint under ``/api/v1/projects/{org_slug}/{project_slug}/``: a session
    member of the organization or an API key of this very project."""

    allow_api_keys = True

    def resolve_access(self, request, api_key, **kwargs) -> Access:
        if api_key is None:
            return resolve_member_project(
                org_slug=kwargs["org_slug"], project_slug=kwargs["project_slug"], user=request.user
            )
        access = super().resolve_access(request, api_key, **kwargs)
        enter_organization_scope(access.organization)
        return resolve_project(access, kwargs["project_slug"])

    @property
    def project(self):
        return self.access.project

    def filter_scoped_queryset(self, queryset):
        if any(field.name == "project" for field in queryset.model._meta.fields):
            return queryset.filter(project=self.project)
        return queryset
