"""The platform's one way to talk to the Hugging Face Hub through ``huggingface_hub``
(Jobs in ``jobs.backends.hf_jobs``, dataset repositories in ``evals.hub``).

``hub_api(endpoint, token)`` is an ``HfApi`` bound to an endpoint that passed the SSRF
guard and to the organization's token (never a token saved on the worker). The library's
process-wide HTTP client is configured once per process:

- a timeout (the library's own client has none: a Hub that stops answering would hold a
  worker forever);
- no redirects: the library takes a redirect it did not follow for a success, so every
  redirect answer is refused (``RedirectRefused``). A file download that must follow the
  Hub's redirect to its CDN does it itself (``evals.hub``), without the token;
- every request's address passes the SSRF guard (the Hub names other addresses in its
  answers: LFS upload and verify URLs), and a request carrying a token goes only to an
  endpoint ``hub_api`` was given: a Hub answer naming another host never receives it;
- no Xet: ``hf_xet`` talks to storage servers the Hub names (never checked by the
  guard), so uploads and downloads take the plain HTTP/LFS path.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

import httpx2
from huggingface_hub import HfApi, constants, set_client_factory

from agentops.netguard import UnsafeUrlError, check_outbound_url, checked_transport

DEFAULT_ENDPOINT = "https://huggingface.co"
REQUEST_TIMEOUT_SECONDS = 30.0

_lock = threading.Lock()
_configured = False
# The origins of the endpoints hub_api was given in this process: the only places a
# request carrying a token may go.
_token_origins: set[tuple[str, str, int]] = set()


class RedirectRefused(httpx2.HTTPError):
    """The Hub answered a redirect, which is never followed."""

    def __init__(self, status: int):
        super().__init__(f"redirect ({status})")
        self.status = status


class AddressRefused(httpx2.HTTPError):
    """A request to an address the platform may not call (SSRF guard), or a token on its
    way to a host that is not the configured Hub endpoint."""


def origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


def _check_request(request: httpx2.Request) -> None:
    url = str(request.url)
    try:
        check_outbound_url(url)
    except UnsafeUrlError as exc:
        raise AddressRefused(f"address refused: {exc}") from None
    if request.headers.get("authorization") and origin(url) not in _token_origins:
        raise AddressRefused(f"the token is only sent to the Hub endpoint, not to {origin(url)[1]}")


def _refuse_redirect(response: httpx2.Response) -> None:
    if response.is_redirect:
        raise RedirectRefused(response.status_code)


def _bounded_client_factory() -> httpx2.Client:
    from huggingface_hub.utils._http import default_client_factory

    # The library's own client, with its hooks, on a transport whose connections go only
    # to an address checked as they connect (the name may have changed since _check_request).
    with default_client_factory() as library_client:
        hooks = library_client.event_hooks
    return httpx2.Client(
        transport=checked_transport(),
        timeout=httpx2.Timeout(REQUEST_TIMEOUT_SECONDS),
        follow_redirects=False,
        event_hooks={
            "request": [_check_request, *hooks["request"]],
            "response": [*hooks["response"], _refuse_redirect],
        },
    )


def configure_client() -> None:
    """Give huggingface_hub's process-wide client the platform's rules, once per process."""
    global _configured
    with _lock:
        if not _configured:
            constants.HF_HUB_DISABLE_XET = True
            set_client_factory(_bounded_client_factory)
            _configured = True


def hub_api(endpoint: str, token: str) -> HfApi:
    """An ``HfApi`` for ``endpoint`` (checked against the SSRF guard now: DNS may have
    changed since it was saved) with ``token``; ``UnsafeUrlError`` or ``ValueError``."""
    if not token:
        # Never let huggingface_hub fall back to a token saved on the worker.
        raise ValueError("no Hugging Face token")
    endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    check_outbound_url(endpoint)
    configure_client()
    with _lock:
        _token_origins.add(origin(endpoint))
    return HfApi(endpoint=endpoint, token=token, library_name="agentops-studio")
