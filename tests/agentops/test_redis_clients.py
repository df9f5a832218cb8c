"""One synchronous Redis client per URL for the process (``agentops.redis_clients``),
however many threads ask for it at once: a client built twice and replaced was
garbage-collected, and redis-py closes a collected client's pool, under a pipeline
another thread had taken from it."""

from __future__ import annotations

import threading
import time

import redis
from django.conf import settings

from agentops import live, redis_clients
from agentops.redis_clients import shared_redis
from runs.services import events

THREADS = 16


def test_threads_asking_at_once_share_one_client(monkeypatch):
    monkeypatch.setattr(redis_clients, "_clients", {})
    built = []
    from_url = redis.Redis.from_url

    def slow_from_url(url, **options):
        time.sleep(0.05)  # long enough for every thread to ask before the first has one
        client = from_url(url, **options)
        built.append(client)
        return client

    monkeypatch.setattr(redis.Redis, "from_url", slow_from_url)
    start = threading.Barrier(THREADS)
    answers: list[tuple[object, bool]] = []

    def ask():
        start.wait()
        client = shared_redis(settings.REDIS_URL)
        with client.pipeline(transaction=False) as pipeline:
            pipeline.ping()
            answers.append((client, pipeline.execute() == [True]))

    threads = [threading.Thread(target=ask) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(built) == 1
    assert answers == [(built[0], True)] * THREADS


def test_live_updates_and_event_notifications_use_the_process_client():
    assert live._redis() is shared_redis(settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0])
    assert events._redis() is shared_redis(settings.REDIS_URL)


def test_a_server_that_does_not_answer_holds_a_caller_two_seconds_at_most():
    client = shared_redis(settings.REDIS_URL)
    options = client.connection_pool.connection_kwargs
    assert options["socket_timeout"] == options["socket_connect_timeout"] == redis_clients.SOCKET_TIMEOUT_SECONDS
