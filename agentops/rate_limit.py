"""Request counts in Redis, shared by every web process: at most ``limit`` requests per
``period`` seconds for one name, in a window that starts with the name's first request.

One round trip per request, atomic (a MULTI/EXEC pipeline: create the counter with its
expiry if it is not there, count, read what is left of the window), so concurrent
requests in different processes never lose a count, and a request costs the same
whether the window holds one request or a thousand. Used by the REST API's throttles
(agentops.api.throttling) and the MCP server's limit (assistant.rate_limit); while Redis
is unreachable their callers let requests through, with a warning that limits are off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentops.redis_clients import shared_redis

PERIOD_SECONDS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60}
PERIOD_SECONDS |= {"h": 3600, "hour": 3600, "d": 86400, "day": 86400}


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: int
    period: int
    retry_after: int = 0  # whole seconds until the window ends (at least 1), when refused


def parse_rate(rate: str) -> tuple[int, int]:
    """``"600/min"`` -> (600, 60); the format is checked at start-up (settings.env_rate)."""
    count, _, unit = rate.partition("/")
    return int(count), PERIOD_SECONDS[unit]


def _queue(pipe, name: str, period: int) -> None:
    pipe.set(name, 0, ex=period, nx=True)
    pipe.incr(name)
    pipe.pttl(name)


def _verdict(results: list, limit: int, period: int) -> Verdict:
    _created, count, ttl_ms = results
    if count <= limit:
        return Verdict(True, limit, period)
    return Verdict(False, limit, period, retry_after=max(1, math.ceil(ttl_ms / 1000)) if ttl_ms > 0 else period)


def count_request(url: str, name: str, limit: int, period: int) -> Verdict:
    """Count one request of ``name`` in the Redis at ``url``; RedisError when it is
    unreachable."""
    with shared_redis(url).pipeline(transaction=True) as pipe:
        _queue(pipe, name, period)
        return _verdict(pipe.execute(), limit, period)


async def count_request_async(redis, name: str, limit: int, period: int) -> Verdict:
    """``count_request`` with the caller's ``redis.asyncio`` client."""
    async with redis.pipeline(transaction=True) as pipe:
        _queue(pipe, name, period)
        return _verdict(await pipe.execute(), limit, period)
