"""django-allauth adapters: sign-up policy, account emails that name the platform, and
social logins that never take over an existing account by email."""

from types import SimpleNamespace

from allauth.account.adapter import DefaultAccountAdapter
from allauth.core import context as allauth_context
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings

PLATFORM_NAME = "AgentOps Studio"


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request) -> bool:
        return settings.ACCOUNT_ALLOW_SIGNUP

    def send_mail(self, template_prefix: str, email: str, context: dict) -> None:
        # allauth's emails greet from and sign with the sites framework's Site, whose one
        # row nobody sets here: it is Django's default, "example.com" ("Hello from
        # example.com!"). They name the platform, and the host the person signed up on.
        request = allauth_context.request
        host = request.get_host() if request is not None else ""
        site = SimpleNamespace(name=PLATFORM_NAME, domain=host)
        super().send_mail(template_prefix, email, {"current_site": site, **context})


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request, sociallogin) -> bool:
        return settings.ACCOUNT_ALLOW_SIGNUP

    def populate_user(self, request, sociallogin, data):
        # allauth copies a generic OIDC provider's `email_verified` claim as it comes,
        # and some providers send it as a string: "false" is truthy, so every
        # `address.verified` check would trust it (and saving it fails with a 500).
        # Only a JSON true means verified. This hook runs before any of those checks.
        for address in sociallogin.email_addresses:
            address.verified = address.verified is True
        return super().populate_user(request, sociallogin, data)

    def is_auto_signup_allowed(self, request, sociallogin) -> bool:
        # Sign up straight from the provider only with an address the provider says it
        # verified; otherwise the sign-up form asks, and email verification applies.
        if not any(address.verified for address in sociallogin.email_addresses):
            return False
        return super().is_auto_signup_allowed(request, sociallogin)
