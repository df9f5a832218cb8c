"""Members, roles and invitations of an organization."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect

from agentops import selectors
from agentops.errors import ServiceError
from agentops.forms import (
    InvitationCreateForm,
    RoleChangeForm,
    assignable_roles,
)
from agentops.models import Invitation, Membership
from agentops.pages import Need, OrganizationPage
from agentops.roles import Role, role_allows
from agentops.services import invitations, organizations


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
                messages.success(
                    request,
                    f"Invitation for {invitation.email} as {invitation.role} created; its email is queued "
                    "(this page shows when it is sent).",
                )
                return redirect("members", org_slug=org_slug)
        return self._render(form, status=400)


def _member(membership_id: int) -> Membership:
    """The member the URL names, in the page's organization (the scope filters the
    query): another organization's is a 404, like a missing one."""
    member = Membership.objects.filter(pk=membership_id).select_related("user").first()
    if member is None:
        raise Http404("member not found")
    return member


class MemberRoleChangeAction(OrganizationPage):
    """Change one member's role (the service refuses what the actor's role may not do)."""

    permissions = {"POST": Need("member:write", "change members' roles")}

    def post(self, request, org_slug, membership_id):
        member = _member(membership_id)
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
        member = _member(membership_id)
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
