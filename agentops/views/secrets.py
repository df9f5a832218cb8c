"""An organization's provider secrets: set, replace, delete; never shown again."""

from django.contrib import messages
from django.shortcuts import redirect

from agentops import selectors
from agentops.errors import ServiceError
from agentops.forms import (
    ProviderSecretForm,
)
from agentops.pages import Need, OrganizationPage
from agentops.services import secrets


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
