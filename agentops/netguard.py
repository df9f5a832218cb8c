"""Outbound URL checks against server-side request forgery (SSRF).

A URL the platform will call on a tenant's behalf (a provider base URL, later
webhook tools and job backends) must not reach the platform's own network: every
address its host resolves to must be public. Checked when the URL is saved and again
when it is called, because DNS can change in between.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

from agentops.errors import InvalidRequest


class UnsafeUrlError(ValueError):
    """The URL is malformed or points at a private, loopback or reserved address."""


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def check_outbound_url(url: str, *, allow_private: bool | None = None) -> str:
    """Return ``url`` if the platform may call it, else raise ``UnsafeUrlError``.

    ``allow_private`` defaults to the ``ALLOW_PRIVATE_PROVIDER_URLS`` setting, on for
    local development and tests that talk to servers on 127.0.0.1.
    """
    if allow_private is None:
        allow_private = settings.ALLOW_PRIVATE_PROVIDER_URLS
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise UnsafeUrlError("the URL must start with http:// or https:// and name a host")
    if parts.username or parts.password:
        raise UnsafeUrlError("the URL must not contain a user name or password")
    if allow_private:
        return url
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UnsafeUrlError("the URL has an invalid port") from None
    try:
        infos = socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        raise UnsafeUrlError(f"the host {parts.hostname} does not resolve") from None
    for info in infos:
        address = info[4][0]
        if not _is_public(address):
            raise UnsafeUrlError(
                f"the host {parts.hostname} resolves to {address}, a private or reserved address; "
                "set ALLOW_PRIVATE_PROVIDER_URLS=true to allow it"
            )
    return url


def check_setting_url(url: str, *, field: str) -> str:
    """``url``, given as the setting ``field``, if the platform may call it; else
    ``InvalidRequest`` (a 400) naming the field and what is wrong."""
    try:
        return check_outbound_url(url)
    except UnsafeUrlError as exc:
        raise InvalidRequest(f"{field}: {exc}") from None
