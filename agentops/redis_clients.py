"""One synchronous Redis client per URL for the whole process.

Its connection pool is thread-safe and starts afresh in a forked child, so every thread
of a web process or of a Celery worker (a pool of threads) shares it: building one per
call cost more than the round trip. It is made under a lock. Made without one, two
threads asking at once each built a client and one replaced the other; the replaced
client, no longer referenced once its caller had taken a pipeline from it (a pipeline
holds the pool, not the client), was garbage-collected, and redis-py's ``Redis.__del__``
closes the client's pool: the pipeline's connection closed under it ("I/O operation on
closed file"), a live update or an event notification lost.

A server that accepts connections but does not answer holds no caller for long
(``SOCKET_TIMEOUT_SECONDS``)."""

from __future__ import annotations

import threading

SOCKET_TIMEOUT_SECONDS = 2.0

_clients: dict[str, object] = {}
_lock = threading.Lock()


def shared_redis(url: str):
    """The process's ``redis.Redis`` for ``url``."""
    client = _clients.get(url)
    if client is None:
        import redis

        with _lock:
            client = _clients.get(url)
            if client is None:
                client = redis.Redis.from_url(
                    url, socket_timeout=SOCKET_TIMEOUT_SECONDS, socket_connect_timeout=SOCKET_TIMEOUT_SECONDS
                )
                _clients[url] = client
    return client
