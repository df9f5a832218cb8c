"""Pages outside any organization: the home page, creating an organization, accepting
an invitation."""

from django.contrib import messages
from django.shortcuts import redirect, render

from agentops import selectors
from agentops.errors import ServiceError
from agentops.forms import (
    OrganizationCreateForm,
)
from agentops.models import Invitation
from agentops.pages import SignedInPage, client_ip
from agentops.services import invitations, organizations


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

    def _render(self, request, invitation: Invitation, *, error: str = "", status: int = 200):
        # The invitation was read across organizations by its token; rendering reads
        # only its own fields and its organization, which is what the link names.
        return render(request, self.template_name, {"invitation": invitation, "error": error}, status=status)

    def get(self, request, token):
        # A link that is not valid: NotFound, the 404 page (agentops.pages.refusal).
        return self._render(request, invitations.invitation_for_token(token))

    def post(self, request, token):
        invitation = invitations.invitation_for_token(token)
        try:
            membership = invitations.invitation_accept(token=token, user=request.user, ip=client_ip(request))
        except ServiceError as exc:
            return self._render(request, invitation, error=exc.message, status=exc.status)
        organization = invitation.organization
        messages.success(request, f"Welcome to {organization.name}: you joined as {membership.role}.")
        return redirect("organization_detail", org_slug=organization.slug)
