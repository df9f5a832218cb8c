"""DRF authentication with project API keys: ``Authorization: Bearer <key>``."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from agentops.services.api_keys import KeyRejected, api_key_authenticate


class ApiKeyPrincipal:
    """``request.user`` for a request made with an API key: authenticated, but no
    user; the key itself is ``request.auth``."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False
    pk = None
    id = None

    def __init__(self, key):
        self.key = key

    def __str__(self) -> str:
        return f"API key {self.key.prefix}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("the Authorization header must be 'Bearer <key>'")
        try:
            raw_key = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("the API key contains invalid characters") from None
        try:
            key = api_key_authenticate(raw_key)
        except KeyRejected as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return ApiKeyPrincipal(key), key

    def authenticate_header(self, request):
        return f'{self.keyword} realm="api"'
