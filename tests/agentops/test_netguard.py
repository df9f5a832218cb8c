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
