"""A real OpenID Connect provider on 127.0.0.1 for login tests (``oidc-provider-mock``).

It is a genuine OIDC server (discovery, authorization form, token, userinfo, JWKS with
signed ID tokens) running in a thread of the test process, so allauth talks to it over
real HTTP exactly as it would to Hugging Face or any other generic OIDC provider.

The client is registered with the provider (``require_client_registration=True``), so
the provider checks allauth's client secret and redirect URI instead of accepting any.

The provider's authorization form only asks for a subject (``sub``); a test chooses the
claims a subject gets (email, email_verified, ...) by storing them first with
``set_user`` (the provider's ``PUT /users/{sub}``), then submits the form as that subject.

Use in a test module (assigning the fixtures makes pytest find them there)::

    from tests import oidc_provider as local_idp

    oidc_provider = local_idp.oidc_provider
    mock_idp = local_idp.mock_idp
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests
import werkzeug.serving

with warnings.catch_warnings():
    # oidc-provider-mock 0.3.4 imports authlib.jose, which authlib deprecates; not ours.
    # authlib.deprecate installs an "always" filter when imported, so import it first.
    import authlib.deprecate  # noqa: F401

    warnings.simplefilter("ignore", DeprecationWarning)
    from oidc_provider_mock import app as oidc_provider_app

# The provider's own code calls authlib APIs that authlib deprecates; not ours to fix.
IGNORE_PROVIDER_WARNINGS = pytest.mark.filterwarnings("ignore::DeprecationWarning:authlib.*")

PROVIDER_ID = "mock"
LOGIN_PATH = f"/accounts/oidc/{PROVIDER_ID}/login/"
CALLBACK_PATH = f"/accounts/oidc/{PROVIDER_ID}/login/callback/"
# allauth builds the redirect URI from the request (the Django test client's host) and
# ACCOUNT_DEFAULT_HTTP_PROTOCOL, which is "https" with DEBUG off as in the test settings.
REDIRECT_URI = f"https://testserver{CALLBACK_PATH}"
TIMEOUT = 10


@dataclass(frozen=True)
class OidcProvider:
    """A running provider and the client registered with it."""

    url: str
    client_id: str
    secret: str

    def set_user(self, sub: str, **claims: object) -> None:
        """Store the claims the provider will release for ``sub`` (replacing earlier ones)."""
        response = requests.put(f"{self.url}/users/{sub}", json=claims, timeout=TIMEOUT)
        response.raise_for_status()

    def authorize(self, authorize_url: str, sub: str) -> str:
        """Submit the authorization form as ``sub``; return the path and query the
        provider redirects the browser back to (allauth's callback)."""
        return self._submit(authorize_url, {"sub": sub})

    def deny(self, authorize_url: str) -> str:
        """Press "Deny" on the authorization form; return the callback path and query."""
        callback = self._submit(authorize_url, {"action": "deny"})
        # oidc-provider-mock 0.3.4 leaves `state` out of its error redirect, which RFC 6749
        # (4.1.2.1) requires and real providers send; without it allauth cannot tell a
        # cancelled login from a forged callback. Add it back as a real provider would.
        state = parse_qs(urlsplit(authorize_url).query)["state"][0]
        if "state=" not in urlsplit(callback).query:
            callback = f"{callback}&{urlencode({'state': state})}"
        return callback

    def _submit(self, authorize_url: str, form: dict[str, str]) -> str:
        if not authorize_url.startswith(f"{self.url}/"):
            raise AssertionError(f"not this provider's authorization URL: {authorize_url}")
        # The form posts back to the same URL, query string included.
        response = requests.post(authorize_url, data=form, allow_redirects=False, timeout=TIMEOUT)
        if response.status_code != 302:
            raise AssertionError(f"provider answered {response.status_code}: {response.text[:500]}")
        location = urlsplit(response.headers["Location"])
        if f"{location.scheme}://{location.netloc}{location.path}" != REDIRECT_URI:
            raise AssertionError(f"provider redirected elsewhere: {response.headers['Location']}")
        return f"{location.path}?{location.query}"


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[OidcProvider]:
    """Run the provider on a free port of 127.0.0.1 for the whole test session."""
    server = werkzeug.serving.make_server(
        "127.0.0.1", 0, oidc_provider_app(require_client_registration=True), threaded=True
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        response = requests.post(
            f"{url}/oauth2/clients",
            json={"redirect_uris": [REDIRECT_URI], "token_endpoint_auth_method": "client_secret_post"},
            timeout=TIMEOUT,
        )
        response.raise_for_status()
        client = response.json()
        yield OidcProvider(url=url, client_id=client["client_id"], secret=client["client_secret"])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def mock_idp(settings, oidc_provider: OidcProvider) -> OidcProvider:
    """Configure allauth's generic OpenID Connect provider "mock" to use the local
    provider, the way OIDC_PROVIDERS configures one in production."""
    settings.SOCIALACCOUNT_PROVIDERS = {
        **settings.SOCIALACCOUNT_PROVIDERS,
        "openid_connect": {
            "OAUTH_PKCE_ENABLED": True,
            "APPS": [
                {
                    "provider_id": PROVIDER_ID,
                    "name": "Mock IdP",
                    "client_id": oidc_provider.client_id,
                    "secret": oidc_provider.secret,
                    "settings": {"server_url": oidc_provider.url, "fetch_userinfo": True},
                }
            ],
        },
    }
    return oidc_provider
