"""Outbound URL checks against server-side request forgery (SSRF).

A URL the platform will call on a tenant's behalf (a provider base URL, later
webhook tools and job backends) must not reach the platform's own network: every
address its host resolves to must be public. Checked when the URL is saved and again
when it is called, because DNS can change in between.

A check before the call is not enough on its own: the HTTP client resolves the name
again when it connects, and a name the caller controls can answer a public address to
the check and a private one a moment later (DNS rebinding). ``outbound_session`` is a
``requests`` session whose connections resolve the host themselves, check every address
and connect to one of the addresses just checked, so what is called is what was checked;
``check_connections`` does the same to a client library's own urllib3 pool manager, and
``checked_transport`` is an ``httpx2`` transport whose connections do it too. A request
sent through a proxy (``HTTPS_PROXY`` in a worker's environment) is resolved by the
proxy: for it only the check before the call applies. And an answer from such a URL is
read within a deadline for the whole of it (``read_within``).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import time
from urllib.parse import urlsplit

import httpcore2
import httpx2
import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager, ProxyManager

from agentops.errors import InvalidRequest


class UnsafeUrlError(ValueError):
    """The URL is malformed or points at a private, loopback or reserved address."""


# IPv6 prefixes that carry an IPv4 address in their last 32 bits, which a translator or
# the host's own stack may deliver to: NAT64's well-known prefix (RFC 6052) and the
# deprecated IPv4-compatible addresses. The local-use NAT64 prefix (RFC 8215) translates
# to any IPv4 address with the embedded one where the operator chose: never public.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        elif ip in _NAT64_LOCAL:
            return False
        else:
            embedded = ip.sixtofour
            if ip in _NAT64 or ip in _IPV4_COMPATIBLE:
                embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
            if embedded is not None and not (embedded.is_global and not embedded.is_multicast):
                return False
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
    public_addresses(parts.hostname, port)
    return url


def public_addresses(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to now, if every one is public; else
    ``UnsafeUrlError``."""
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        raise UnsafeUrlError(f"the host {host} does not resolve") from None
    addresses = []
    for info in infos:
        address = info[4][0]
        if not _is_public(address):
            raise UnsafeUrlError(
                f"the host {host} resolves to {address}, a private or reserved address; "
                "set ALLOW_PRIVATE_PROVIDER_URLS=true to allow it"
            )
        if address not in addresses:
            addresses.append(address)
    return addresses


def check_setting_url(url: str, *, field: str) -> str:
    """``url``, given as the setting ``field``, if the platform may call it; else
    ``InvalidRequest`` (a 400) naming the field and what is wrong."""
    try:
        return check_outbound_url(url)
    except UnsafeUrlError as exc:
        raise InvalidRequest(f"{field}: {exc}") from None


class CheckedAddressConnection:
    """A urllib3 connection that connects only to an address it has just checked (see
    the module's docstring). The TLS server name and the Host header stay the URL's own
    host, so a certificate is still checked against the name. A mixin, first among the
    bases of a urllib3 connection class (a client library's own, as boto3's)."""

    def _new_conn(self):
        if settings.ALLOW_PRIVATE_PROVIDER_URLS:
            return super()._new_conn()
        host = self._dns_host
        addresses = public_addresses(host.strip("[]"), self.port)
        failure = None
        for address in addresses:
            self._dns_host = address
            try:
                return super()._new_conn()
            except OSError as exc:  # urllib3's NewConnectionError, ConnectTimeoutError: try the next address
                failure = exc
            finally:
                self._dns_host = host
        raise failure


@functools.cache
def _checked_pools(http_pool: type, https_pool: type) -> dict:
    """Subclasses of the urllib3 pool classes ``http_pool`` and ``https_pool`` whose
    connections are their own with ``CheckedAddressConnection`` first among the bases."""

    def checked(pool: type) -> type:
        connection = type(f"Checked{pool.ConnectionCls.__name__}", (CheckedAddressConnection, pool.ConnectionCls), {})
        return type(f"Checked{pool.__name__}", (pool,), {"ConnectionCls": connection})

    return {"http": checked(http_pool), "https": checked(https_pool)}


def check_connections(
    pool_manager: PoolManager, http_pool: type = HTTPConnectionPool, https_pool: type = HTTPSConnectionPool
) -> PoolManager:
    """Make the urllib3 ``pool_manager`` (a client library's own, with its own pool classes
    ``http_pool`` and ``https_pool``, as botocore's) connect only to an address checked as
    it connects; a refused one raises ``UnsafeUrlError`` from the call. A proxy manager is
    left as it is: the proxy, not this process, resolves the host."""
    if not isinstance(pool_manager, ProxyManager):
        pool_manager.pool_classes_by_scheme = _checked_pools(http_pool, https_pool)
    return pool_manager


class _CheckedAddressAdapter(HTTPAdapter):
    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        check_connections(self.poolmanager)


def outbound_session() -> requests.Session:
    """A ``requests`` session for calls to a URL a tenant set: each connection goes to an
    address checked as it connects (``UnsafeUrlError`` otherwise, raised by the call).
    Callers still pass ``allow_redirects=False``: a redirect is an answer, not followed."""
    session = requests.Session()
    adapter = _CheckedAddressAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class UnsafeConnectError(httpcore2.ConnectError):
    """A connection refused because its host now resolves to a private or reserved
    address: ``httpx2`` raises it to the caller as an ``httpx2.ConnectError`` with this
    message."""


class _CheckedNetworkBackend(httpcore2.SyncBackend):
    """httpcore's network backend, connecting only to an address checked as it connects
    (the TLS server name stays the URL's own host)."""

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        if settings.ALLOW_PRIVATE_PROVIDER_URLS:
            return super().connect_tcp(host, port, timeout, local_address, socket_options)
        try:
            addresses = public_addresses(host, port)
        except UnsafeUrlError as exc:
            raise UnsafeConnectError(str(exc)) from None
        failure = None
        for address in addresses:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore2.ConnectError as exc:  # try the next address
                failure = exc
        raise failure


def refused_connection(exc: BaseException) -> bool:
    """Whether ``exc`` (an ``httpx2.ConnectError``, say) comes of a connection refused by
    ``checked_transport``: not worth trying again."""
    while exc is not None:
        if isinstance(exc, UnsafeConnectError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def checked_transport(**options) -> httpx2.HTTPTransport:
    """An ``httpx2`` transport (``options`` as ``httpx2.HTTPTransport`` takes them) whose
    connections go to an address checked as they connect; a refused one raises
    ``httpx2.ConnectError`` naming it."""
    transport = httpx2.HTTPTransport(**options)
    # httpx2 takes no network backend of its own; its pool (httpcore2.ConnectionPool) does,
    # read on every new connection. The rebinding tests fail if the attribute moves.
    transport._pool._network_backend = _CheckedNetworkBackend()
    return transport


def read_within(response, *, max_bytes: int, deadline: float) -> bytes:
    """The body of a streamed ``requests`` response, at most ``max_bytes`` + 1 bytes (so
    the caller can tell it was over), read before ``deadline`` (a ``time.monotonic()``
    instant). ``requests``' timeout bounds each wait for bytes, not the whole answer:
    a server trickling a byte just inside it held a worker, and the run or score waiting
    on it, for days (200 kB at 10 s a byte). Raises ``requests.Timeout`` past the deadline."""
    chunks, total = [], 0
    while total <= max_bytes:
        # read1: what the next receive brings, instead of waiting for the whole amount.
        chunk = response.raw.read1(max_bytes + 1 - total, decode_content=True)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if time.monotonic() > deadline:
            raise requests.Timeout("the answer took longer than its deadline")
    return b"".join(chunks)
