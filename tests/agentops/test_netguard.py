"""agentops/netguard.py: outbound URLs reach public addresses only, and the address a
call connects to is the one just checked."""

import pytest

from agentops.netguard import UnsafeUrlError, check_outbound_url, outbound_session


def test_outbound_session_refuses_a_name_rebound_to_a_private_address_after_the_check(rebinding):
    url = check_outbound_url(f"{rebinding.url}/x")  # the name still answers a public address
    with outbound_session() as session, pytest.raises(UnsafeUrlError, match="resolves to 127.0.0.1"):
        session.get(url, timeout=5)
    assert rebinding.received == []


def test_outbound_session_connects_where_the_address_rule_is_lifted(rebinding, settings):
    url = check_outbound_url(f"{rebinding.url}/x")
    settings.ALLOW_PRIVATE_PROVIDER_URLS = True
    with outbound_session() as session:
        response = session.get(url, timeout=5)
    assert response.status_code == 200 and [request["path"] for request in rebinding.received] == ["/x"]


@pytest.mark.parametrize(
    "host",
    [
        "[::ffff:169.254.169.254]",  # IPv4-mapped
        "[64:ff9b::a9fe:a9fe]",  # NAT64 (RFC 6052) of 169.254.169.254
        "[64:ff9b::7f00:1]",  # NAT64 of 127.0.0.1
        "[64:ff9b:1::a9fe:a9fe]",  # local-use NAT64 (RFC 8215)
        "[2002:a9fe:a9fe::1]",  # 6to4 of 169.254.169.254
        "[2002:a00:1::1]",  # 6to4 of 10.0.0.1
        "[::127.0.0.1]",  # IPv4-compatible (deprecated)
        "[::a9fe:a9fe]",
    ],
)
def test_ipv6_forms_of_a_private_ipv4_address_are_refused(host):
    with pytest.raises(UnsafeUrlError, match="private or reserved"):
        check_outbound_url(f"http://{host}/", allow_private=False)


@pytest.mark.parametrize("host", ["[64:ff9b::808:808]", "[2002:808:808::1]", "[2606:4700:4700::1111]"])
def test_ipv6_forms_of_a_public_address_are_allowed(host):
    assert check_outbound_url(f"https://{host}/v1", allow_private=False) == f"https://{host}/v1"
