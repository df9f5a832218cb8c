"""The one access check of every server-rendered organization and project page.

``OrganizationPage`` and ``ProjectPage`` are to the pages what ``agentops.api.base``
is to the API: they require a signed-in user, resolve the organization (and project)
from the URL through ``agentops.access``, answer 404 for anything the user may not
see (exactly like a missing one), check the permission the page declares for the
HTTP method, and run the handler *and the template rendering* inside
``organization_scope`` so tenant-owned querysets work in templates too.

Pages declare ``permissions = {"GET": Need("member:read", "see the members")}``;
a method without an entry answers 405. Subclasses never override ``dispatch``
(checked when the class is defined), so none can skip the check.

They also map a service's refusal once, as ``agentops.api.errors`` does for the API: a
``ServiceError`` that a handler lets through is answered by ``refusal`` with the error's
status and message (``NotFound`` the 404 page, like a missing object; ``Forbidden`` the
403 page with the reason; any other the refused page), never a 500. A handler catches a
``ServiceError`` itself only to show it in place: inside the form it re-renders, or as a
message that names what failed on the page it returns to.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.template.response import SimpleTemplateResponse
from django.views import View

from agentops import live, selectors
from agentops.access import Access, resolve_organization, resolve_project
from agentops.errors import Forbidden, InvalidRequest, NotFound, ServiceError
from agentops.jsonsafe import query_problem
from agentops.scoping import organization_scope, reset_scope


class Need(NamedTuple):
    """The permission a method needs, and how the refusal names what was attempted."""

    permission: str
    what: str


class Can:
    """Permission checks for templates: ``{% if can.member_write %}`` asks
    ``access.allows("member:write")``. Hiding a link is a courtesy; the page's own
    ``permissions`` map is what the server enforces."""

    def __init__(self, access: Access):
        self._access = access

    def __getitem__(self, name: str) -> bool:
        return self._access.allows(name.replace("_", ":", 1))


def otlp_endpoint(request) -> str:
    """The OTLP/HTTP endpoint agents export to (OTEL_EXPORTER_OTLP_ENDPOINT)."""
    return request.build_absolute_uri("/api/v1/otlp")


def client_ip(request) -> str | None:
    return request.META.get("REMOTE_ADDR")


def forbidden(request, message: str, context: dict | None = None) -> HttpResponse:
    """The 403 page, with the reason in words."""
    return render(request, "403.html", {**(context or {}), "message": message}, status=403)


def refusal(request, exc: ServiceError, context: dict | None = None) -> HttpResponse:
    """A page's answer to a service's refusal its handler did not show itself, with the
    status the API answers it with: ``NotFound`` is the 404 page (exactly like a missing
    object), ``Forbidden`` the 403 page with the reason, any other the refused page with
    its message."""
    if isinstance(exc, NotFound):
        raise Http404(exc.message)
    if isinstance(exc, Forbidden):
        return forbidden(request, exc.message, context)
    return render(
        request, "refused.html", {**(context or {}), "message": exc.message, "status": exc.status}, status=exc.status
    )


class SignedInPage(View):
    """A page for any signed-in user, outside any organization (creating one, accepting
    an invitation). Signed-out visitors go to the login page and come back."""

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        # Tenant rows are out of reach here unless a handler enters a scope itself.
        with reset_scope():
            try:
                return super().dispatch(request, *args, **kwargs)
            except ServiceError as exc:
                return refusal(request, exc)


class OrganizationPage(View):
    """A page under ``/o/<org_slug>/``, for members of that organization."""

    permissions: dict[str, Need] = {}
    access: Access

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "dispatch" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides dispatch, which would skip the page's access check; "
                "declare `permissions` and write get/post instead"
            )
        unknown = [method for method in cls.permissions if method.lower() not in cls.http_method_names]
        if unknown:
            raise TypeError(f"{cls.__name__}.permissions names unknown methods: {', '.join(unknown)}")

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        need = self.permissions.get(request.method)
        if need is None and request.method == "HEAD":
            need = self.permissions.get("GET")
        if need is None:
            return self.http_method_not_allowed(request, *args, **kwargs)
        with reset_scope():
            try:
                self.access = self.resolve_access(request, **kwargs)
            except NotFound as exc:
                raise Http404(exc.message) from None
            with organization_scope(self.access.organization):
                try:
                    self.access.require(need.permission, need.what)
                except Forbidden as exc:
                    return forbidden(request, exc.message, self.page_context())
                try:
                    if problem := query_problem(request.GET):
                        raise InvalidRequest(problem)
                    response = super().dispatch(request, *args, **kwargs)
                    # A lazily rendered response would otherwise render after the scope ends.
                    if isinstance(response, SimpleTemplateResponse) and not response.is_rendered:
                        response.render()
                except ServiceError as exc:
                    return refusal(request, exc, self.page_context())
                return response

    def resolve_access(self, request, **kwargs) -> Access:
        return resolve_organization(org_slug=kwargs["org_slug"], user=request.user)

    @property
    def organization(self):
        return self.access.organization

    @property
    def membership(self):
        return self.access.membership

    @property
    def ip(self) -> str | None:
        return client_ip(self.request)

    def live_url(self, topics: Iterable[str] = ()) -> str:
        """The page's live socket, naming the ``topics`` it shows (agentops/live.py)."""
        return live.live_path(org_slug=self.organization.slug, topics=topics)

    def page_context(self, *, live_topics: Iterable[str] = ()) -> dict:
        """What the layout needs on every page of the organization. ``live_topics``: the
        parts of the page that live events update (none: only the top bar's names)."""
        return {
            "access": self.access,
            "organization": self.organization,
            "membership": self.membership,
            "project": self.access.project,
            "can": Can(self.access),
            "nav_projects": selectors.project_list(organization=self.organization),
            "live_url": self.live_url(live_topics),
        }

    def render_page(
        self, template: str, context: dict | None = None, *, status: int = 200, live_topics: Iterable[str] = ()
    ) -> HttpResponse:
        """Render ``template`` now, inside the organization's scope; its socket hears the
        events of ``live_topics``."""
        return render(
            self.request, template, {**self.page_context(live_topics=live_topics), **(context or {})}, status=status
        )


class ProjectPage(OrganizationPage):
    """A page under ``/o/<org_slug>/p/<project_slug>/``."""

    def resolve_access(self, request, **kwargs) -> Access:
        access = super().resolve_access(request, **kwargs)
        return resolve_project(access, kwargs["project_slug"])

    @property
    def project(self):
        return self.access.project

    def live_url(self, topics: Iterable[str] = ()) -> str:
        return live.live_path(org_slug=self.organization.slug, project_slug=self.project.slug, topics=topics)
