"""An organization's overview and settings: rename, transfer ownership, delete."""

from django.contrib import messages
from django.shortcuts import redirect

from agentops import selectors
from agentops.errors import ServiceError
from agentops.forms import (
    OrganizationDeleteForm,
    OrganizationRenameForm,
    ProjectCreateForm,
    TransferOwnershipForm,
)
from agentops.models import Membership
from agentops.pages import Need, OrganizationPage
from agentops.services import organizations


class OrganizationOverviewPage(OrganizationPage):
    """The organization's projects, and a form to create one."""

    permissions = {
        "GET": Need("project:read", "see this organization's projects"),
        "POST": Need("project:write", "create projects"),
    }

    def _render(self, form=None, *, status=200):
        return self.render_page(
            "agentops/organization_detail.html",
            {
                "projects": selectors.project_list(organization=self.organization),
                "member_count": selectors.membership_list(organization=self.organization).count(),
                "form": form or ProjectCreateForm(),
            },
            status=status,
        )

    def get(self, request, org_slug):
        return self._render()

    def post(self, request, org_slug):
        form = ProjectCreateForm(request.POST)
        if form.is_valid():
            try:
                project = organizations.project_create(
                    organization=self.organization,
                    actor=request.user,
                    name=form.cleaned_data["name"],
                    slug=form.cleaned_data["slug"] or None,
                    ip=self.ip,
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Project “{project.name}” created.")
                return redirect("project_detail", org_slug=org_slug, project_slug=project.slug)
        return self._render(form, status=400)


class OrganizationSettingsPage(OrganizationPage):
    """Rename the organization; owners also transfer ownership or delete it."""

    permissions = {
        "GET": Need("org:write", "change this organization's settings"),
        "POST": Need("org:write", "rename this organization"),
    }

    def _render(self, *, rename_form=None, transfer_form=None, delete_form=None, status=200):
        others = self.others()
        return self.render_page(
            "agentops/organization_settings.html",
            {
                "rename_form": rename_form or OrganizationRenameForm(initial={"name": self.organization.name}),
                "transfer_form": transfer_form or TransferOwnershipForm(memberships=others),
                "delete_form": delete_form or OrganizationDeleteForm(),
                "has_other_members": bool(others),
            },
            status=status,
        )

    def others(self) -> list[Membership]:
        """The members ownership can be transferred to."""
        members = selectors.membership_list(organization=self.organization)
        return [member for member in members if member.pk != self.membership.pk]

    def get(self, request, org_slug):
        return self._render()

    def post(self, request, org_slug):
        form = OrganizationRenameForm(request.POST)
        if form.is_valid():
            try:
                organizations.organization_update(
                    organization=self.organization, actor=request.user, name=form.cleaned_data["name"], ip=self.ip
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, "The organization was renamed.")
                return redirect("organization_settings", org_slug=org_slug)
        return self._render(rename_form=form, status=400)


class OrganizationTransferAction(OrganizationSettingsPage):
    """Make another member the owner; the current owner becomes an admin."""

    permissions = {"POST": Need("org:transfer", "transfer ownership")}

    def post(self, request, org_slug):
        form = TransferOwnershipForm(request.POST, memberships=self.others())
        if form.is_valid():
            new_owner = Membership.objects.select_related("user").get(pk=form.cleaned_data["membership"])
            try:
                organizations.organization_transfer_ownership(
                    actor_membership=self.membership, new_owner=new_owner, ip=self.ip
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"{new_owner.user.email} is now an owner; you are an admin.")
                return redirect("members", org_slug=org_slug)
        return self._render(transfer_form=form, status=400)


class OrganizationDeleteAction(OrganizationSettingsPage):
    """Delete the organization and everything in it (owners; confirm with the slug)."""

    permissions = {"POST": Need("org:delete", "delete this organization")}

    def post(self, request, org_slug):
        form = OrganizationDeleteForm(request.POST)
        if form.is_valid():
            name = self.organization.name
            try:
                organizations.organization_delete(
                    organization=self.organization,
                    actor=request.user,
                    confirm_slug=form.cleaned_data["confirm"].strip(),
                    ip=self.ip,
                )
            except ServiceError as exc:
                form.add_error("confirm", exc.message)
            else:
                messages.success(request, f"The organization “{name}” was deleted.")
                return redirect("home")
        return self._render(delete_form=form, status=400)
