"""Server-rendered pages of the platform core. Every organization and project page
inherits ``agentops.pages.OrganizationPage`` or ``ProjectPage``, which check access;
the views here only parse forms, call one service or selector, and render.

Forms post to the URL of the page that shows them, so a refused submission re-renders
that page with the error; actions on one row of a list (revoke, remove, change a role)
post to their own URL and come back to the list with a message.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse

from agentops import selectors
from agentops.api.errors import api_not_found, api_server_error
from agentops.errors import ServiceError
from agentops.forms import (
    ApiKeyCreateForm,
    AuditFilterForm,
    InvitationCreateForm,
    OrganizationCreateForm,
    OrganizationDeleteForm,
    OrganizationRenameForm,
    ProjectCreateForm,
    ProjectDeleteForm,
    ProjectRenameForm,
    ProviderSecretForm,
    RoleChangeForm,
    TransferOwnershipForm,
    assignable_roles,
)
from agentops.models import ApiKey, Invitation, Membership
from agentops.pages import Need, OrganizationPage, ProjectPage, SignedInPage, client_ip
from agentops.roles import Role, role_allows
from agentops.services import api_keys, invitations, organizations, secrets

AUDIT_PAGE_SIZE = 50


def otlp_endpoint(request) -> str:
    return request.build_absolute_uri("/api/v1/otlp")


# --- Outside any organization ------------------------------------------------------


def home(request):
    """Signed out: the login page. Otherwise the first organization, or a welcome page
    that offers to create one."""
    if not request.user.is_authenticated:
        return redirect("account_login")
    first = selectors.organizations_for_user(user=request.user).first()
    if first is not None:
        return redirect("organization_detail", org_slug=first.slug)
    return render(request, "agentops/welcome.html", {"form": OrganizationCreateForm()})


class OrganizationCreatePage(SignedInPage):
    """Create an organization; its creator becomes the owner."""

    template_name = "agentops/organization_create.html"

    def get(self, request):
        return render(request, self.template_name, {"form": OrganizationCreateForm()})

    def post(self, request):
        form = OrganizationCreateForm(request.POST)
        if form.is_valid():
            try:
                organization = organizations.organization_create(
                    name=form.cleaned_data["name"],
                    slug=form.cleaned_data["slug"] or None,
                    owner=request.user,
                    ip=client_ip(request),
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Organization “{organization.name}” created. You are its owner.")
                return redirect("organization_detail", org_slug=organization.slug)
        return render(request, self.template_name, {"form": form}, status=400)


class InvitationAcceptPage(SignedInPage):
    """The page an invitation link opens: who invites you, as what, and an Accept button.
    The token is the credential; the service checks the user's verified address."""

    template_name = "agentops/invitation_accept.html"

    def _invitation(self, token: str) -> Invitation:
        try:
            return invitations.invitation_for_token(token)
        except ServiceError as exc:
            raise Http404(exc.message) from None

    def _render(self, request, invitation: Invitation, *, error: str = "", status: int = 200):
        # The invitation was read across organizations by its token; rendering reads
        # only its own fields and its organization, which is what the link names.
        return render(request, self.template_name, {"invitation": invitation, "error": error}, status=status)

    def get(self, request, token):
        return self._render(request, self._invitation(token))

    def post(self, request, token):
        invitation = self._invitation(token)
        try:
            membership = invitations.invitation_accept(token=token, user=request.user, ip=client_ip(request))
        except ServiceError as exc:
            return self._render(request, invitation, error=exc.message, status=exc.status)
        organization = invitation.organization
        messages.success(request, f"Welcome to {organization.name}: you joined as {membership.role}.")
        return redirect("organization_detail", org_slug=organization.slug)


# --- Organization pages ----------------------------------------------------------


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


class MembersPage(OrganizationPage):
    """Members and their roles; open invitations; invite someone."""

    permissions = {
        "GET": Need("member:read", "see the members"),
        "POST": Need("member:write", "invite members"),
    }

    def _render(self, form=None, *, status=200):
        actor_role = self.membership.role
        can_manage = role_allows(actor_role, "member:write")
        rows = []
        for member in selectors.membership_list(organization=self.organization):
            touches_owner = member.role == Role.OWNER
            editable = (
                can_manage
                and member.user_id != self.request.user.pk
                and (not touches_owner or role_allows(actor_role, "member:owners"))
            )
            rows.append({"membership": member, "editable": editable, "is_self": member.user_id == self.request.user.pk})
        return self.render_page(
            "agentops/members.html",
            {
                "rows": rows,
                "assignable_roles": assignable_roles(actor_role),
                "invitations": selectors.invitation_list(organization=self.organization, open_only=True)
                if can_manage
                else [],
                "form": form or InvitationCreateForm(actor_role=actor_role),
            },
            status=status,
        )

    def get(self, request, org_slug):
        return self._render()

    def post(self, request, org_slug):
        form = InvitationCreateForm(request.POST, actor_role=self.membership.role)
        if form.is_valid():
            try:
                invitation, _token = invitations.invitation_create(
                    actor_membership=self.membership,
                    email=form.cleaned_data["email"],
                    role=form.cleaned_data["role"],
                    base_url=request.build_absolute_uri("/"),
                    ip=self.ip,
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Invitation sent to {invitation.email} as {invitation.role}.")
                return redirect("members", org_slug=org_slug)
        return self._render(form, status=400)


class MemberRoleChangeAction(OrganizationPage):
    """Change one member's role (the service refuses what the actor's role may not do)."""

    permissions = {"POST": Need("member:write", "change members' roles")}

    def post(self, request, org_slug, membership_id):
        member = Membership.objects.filter(pk=membership_id).select_related("user").first()
        if member is None:
            raise Http404("member not found")
        form = RoleChangeForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Choose one of the roles.")
            return redirect("members", org_slug=org_slug)
        try:
            organizations.membership_change_role(
                actor_membership=self.membership, membership=member, role=form.cleaned_data["role"], ip=self.ip
            )
        except ServiceError as exc:
            messages.error(request, f"Could not change the role of {member.user.email}: {exc.message}.")
        else:
            messages.success(request, f"{member.user.email} is now {form.cleaned_data['role']}.")
        return redirect("members", org_slug=org_slug)


class MemberRemoveAction(OrganizationPage):
    """Remove another member from the organization."""

    permissions = {"POST": Need("member:write", "remove members")}

    def post(self, request, org_slug, membership_id):
        member = Membership.objects.filter(pk=membership_id).select_related("user").first()
        if member is None:
            raise Http404("member not found")
        try:
            organizations.membership_remove(actor_membership=self.membership, membership=member, ip=self.ip)
        except ServiceError as exc:
            messages.error(request, f"Could not remove {member.user.email}: {exc.message}.")
        else:
            messages.success(request, f"{member.user.email} was removed from the organization.")
        return redirect("members", org_slug=org_slug)


class MemberLeaveAction(OrganizationPage):
    """Leave the organization: any member may, except its last owner."""

    permissions = {"POST": Need("org:read", "leave this organization")}

    def post(self, request, org_slug):
        try:
            organizations.membership_remove(actor_membership=self.membership, membership=self.membership, ip=self.ip)
        except ServiceError as exc:
            messages.error(request, f"You cannot leave: {exc.message}.")
            return redirect("members", org_slug=org_slug)
        messages.success(request, f"You left {self.organization.name}.")
        return redirect("home")


class InvitationRevokeAction(OrganizationPage):
    """Revoke an open invitation so its link stops working."""

    permissions = {"POST": Need("member:write", "revoke invitations")}

    def post(self, request, org_slug, invitation_id):
        invitation = Invitation.objects.filter(pk=invitation_id).first()
        if invitation is None:
            raise Http404("invitation not found")
        try:
            invitations.invitation_revoke(actor_membership=self.membership, invitation=invitation, ip=self.ip)
        except ServiceError as exc:
            messages.error(request, f"Could not revoke the invitation of {invitation.email}: {exc.message}.")
        else:
            messages.success(request, f"The invitation of {invitation.email} was revoked.")
        return redirect("members", org_slug=org_slug)


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


class ProviderSecretsPage(OrganizationPage):
    """The organization's LLM provider credentials: which are saved, never the keys."""

    permissions = {
        "GET": Need("secret:read", "see provider credentials"),
        "POST": Need("secret:write", "change provider credentials"),
    }

    def _render(self, form=None, *, status=200):
        return self.render_page(
            "agentops/secrets.html",
            {
                "secrets": selectors.provider_secret_list(organization=self.organization),
                "form": form or ProviderSecretForm(),
            },
            status=status,
        )

    def get(self, request, org_slug):
        return self._render()

    def post(self, request, org_slug):
        form = ProviderSecretForm(request.POST)
        if form.is_valid():
            try:
                secret = secrets.provider_secret_set(
                    organization=self.organization,
                    actor=request.user,
                    provider=form.cleaned_data["provider"],
                    api_key=form.cleaned_data["api_key"],
                    base_url=form.cleaned_data["base_url"],
                    ip=self.ip,
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(
                    request, f"{secret.get_provider_display()} credentials saved (…{secret.api_key_hint})."
                )
                return redirect("secrets", org_slug=org_slug)
        return self._render(form, status=400)


class ProviderSecretDeleteAction(OrganizationPage):
    permissions = {"POST": Need("secret:write", "delete provider credentials")}

    def post(self, request, org_slug, provider):
        try:
            secrets.provider_secret_delete(
                organization=self.organization, actor=request.user, provider=provider, ip=self.ip
            )
        except ServiceError as exc:
            messages.error(request, f"Could not delete the credentials: {exc.message}.")
        else:
            messages.success(request, f"The {provider} credentials were deleted.")
        return redirect("secrets", org_slug=org_slug)


class AuditLogPage(OrganizationPage):
    """Who did what, newest first, filterable by the start of the action name."""

    permissions = {"GET": Need("audit:read", "read the audit log")}

    def get(self, request, org_slug):
        form = AuditFilterForm(request.GET)
        action = form.cleaned_data["action"].strip() if form.is_valid() else ""
        events = selectors.audit_event_list(organization=self.organization, action=action or None)
        page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
        return self.render_page("agentops/audit_log.html", {"form": form, "page": page, "action": action})


# --- Project pages -----------------------------------------------------------------


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


# --- Error pages -------------------------------------------------------------------


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return render(request, "404.html", status=404)


def server_error(request):
    if request.path.startswith("/api/"):
        return api_server_error(request)
    return render(request, "500.html", status=500)
