"""A project's overview and its API keys (shown once at creation)."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse

from agentops import selectors
from agentops.errors import ServiceError
from agentops.forms import (
    ApiKeyCreateForm,
    ProjectDeleteForm,
    ProjectRenameForm,
)
from agentops.models import ApiKey
from agentops.pages import Need, ProjectPage, otlp_endpoint
from agentops.services import api_keys, organizations


class ProjectOverviewPage(ProjectPage):
    """A project: how to send it traces, where its work lives; rename or delete it."""

    permissions = {
        "GET": Need("project:read", "see this project"),
        "POST": Need("project:write", "rename this project"),
    }

    def _render(self, *, rename_form=None, delete_form=None, status=200):
        return self.render_page(
            "agentops/project_detail.html",
            {
                "otlp_endpoint": otlp_endpoint(self.request),
                "rename_form": rename_form or ProjectRenameForm(initial={"name": self.project.name}),
                "delete_form": delete_form or ProjectDeleteForm(),
            },
            status=status,
        )

    def get(self, request, org_slug, project_slug):
        return self._render()

    def post(self, request, org_slug, project_slug):
        form = ProjectRenameForm(request.POST)
        if form.is_valid():
            try:
                organizations.project_update(
                    project=self.project, actor=request.user, name=form.cleaned_data["name"], ip=self.ip
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, "The project was renamed.")
                return redirect("project_detail", org_slug=org_slug, project_slug=project_slug)
        return self._render(rename_form=form, status=400)


class ProjectDeleteAction(ProjectOverviewPage):
    """Delete the project and everything in it, once its slug is typed to confirm."""

    permissions = {"POST": Need("project:write", "delete this project")}

    def post(self, request, org_slug, project_slug):
        form = ProjectDeleteForm(request.POST)
        if form.is_valid() and form.cleaned_data["confirm"].strip() != self.project.slug:
            form.add_error("confirm", f"type the project's slug '{self.project.slug}' to confirm deletion")
        if form.is_valid():
            name = self.project.name
            try:
                organizations.project_delete(project=self.project, actor=request.user, ip=self.ip)
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"The project “{name}” was deleted.")
                return redirect("organization_detail", org_slug=org_slug)
        return self._render(delete_form=form, status=400)


class ApiKeysPage(ProjectPage):
    """The project's API keys (prefix and metadata only) and a form to create one. A new
    key's plaintext is in the response to the POST, once, and nowhere else."""

    permissions = {
        "GET": Need("apikey:read", "see this project's API keys"),
        "POST": Need("apikey:write", "create API keys"),
    }

    def _render(self, form=None, *, status=200):
        return self.render_page(
            "agentops/api_keys.html",
            {"keys": selectors.api_key_list(project=self.project), "form": form or ApiKeyCreateForm()},
            status=status,
        )

    def get(self, request, org_slug, project_slug):
        return self._render()

    def post(self, request, org_slug, project_slug):
        form = ApiKeyCreateForm(request.POST)
        if form.is_valid():
            try:
                key, raw_key = api_keys.api_key_create(
                    project=self.project,
                    actor=request.user,
                    name=form.cleaned_data["name"],
                    scopes=form.cleaned_data["scopes"],
                    expires_at=form.expires_at(),
                    ip=self.ip,
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                # Rendered, not redirected: the plaintext must never be stored (in the
                # session or a message) to survive a redirect.
                response = self.render_page(
                    "agentops/api_key_created.html",
                    {"key": key, "raw_key": raw_key, "otlp_endpoint": otlp_endpoint(request)},
                )
                response["Cache-Control"] = "no-store"
                return response
        return self._render(form, status=400)


class ApiKeyRevokeAction(ProjectPage):
    permissions = {"POST": Need("apikey:write", "revoke API keys")}

    def post(self, request, org_slug, project_slug, key_id):
        key = ApiKey.objects.filter(project=self.project, pk=key_id).first()
        if key is None:
            raise Http404("API key not found")
        try:
            api_keys.api_key_revoke(key=key, actor=request.user, ip=self.ip)
        except ServiceError as exc:
            messages.error(request, f"Could not revoke {key.prefix}…: {exc.message}.")
        else:
            messages.success(request, f"The key {key.prefix}… (“{key.name}”) was revoked.")
        return redirect(reverse("api_keys", kwargs={"org_slug": org_slug, "project_slug": project_slug}))
