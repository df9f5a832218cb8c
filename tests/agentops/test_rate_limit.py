"""The API's rate limits as Redis counts (agentops.rate_limit): exact under concurrent
requests, one counter per key or user whatever the window holds, refusals with the
seconds left in the window."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import redis
from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


def _cache_redis() -> redis.Redis:
    return redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])


def test_concurrent_requests_never_lose_a_count(monkeypatch):
    """Eight threads (each a process's worth of requests) through the API's throttle at
    once: exactly the limit is let through, however their round trips interleave."""
    from types import SimpleNamespace

    from agentops.api.throttling import ApiKeyRateThrottle
    from agentops.models import ApiKey

    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"api_key": "50/min", "user": "1000/min"})
    # A key id no other test uses (the counter is named by it).
    request = SimpleNamespace(auth=ApiKey(pk=10**12 + uuid.uuid4().int % 10**9))

    def burst(_):
        return [ApiKeyRateThrottle().allow_request(request, None) for _ in range(25)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        verdicts = [allowed for results in pool.map(burst, range(8)) for allowed in results]
    assert len(verdicts) == 200
    assert verdicts.count(True) == 50
    throttle = ApiKeyRateThrottle()
    assert not throttle.allow_request(request, None)
    assert 1 <= throttle.wait() <= 60


def test_a_keys_limit_is_one_counter_that_ends_with_its_window(tenant, make_api_key, monkeypatch):
    from rest_framework.test import APIClient

    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"api_key": "5/min", "user": "1000/min"})
    key, raw = make_api_key(tenant.project, ["read"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    url = "/api/v1/projects/acme/agent/runs/"
    assert [client.get(url).status_code for _ in range(5)] == [200] * 5
    refused = client.get(url)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert refused.json()["error"]["details"]["retry_after"] == int(refused["Retry-After"])

    # What Redis holds for the key: one count (every request, the refused one too),
    # expiring with the window; not a list of every request's time.
    counter = f"{settings.REDIS_KEY_PREFIX}:rate:api_key:{key.pk}"
    store = _cache_redis()
    assert store.type(counter) == b"string" and int(store.get(counter)) == 6
    assert 0 < store.pttl(counter) <= 60_000

    # The window over (its counter expired), the key is let through again.
    store.delete(counter)
    assert client.get(url).status_code == 200


def test_a_users_limit_counts_apart_from_the_keys(tenant, client_for, key_client, monkeypatch):
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"api_key": "1000/min", "user": "2/min"})
    member = client_for(tenant.member)
    url = "/api/v1/projects/acme/agent/runs/"
    assert [member.get(url).status_code for _ in range(3)] == [200, 200, 429]
    assert client_for(tenant.owner).get(url).status_code == 200  # another user
    assert key_client(tenant.project, ["read"]).get(url).status_code == 200  # a key of the project
