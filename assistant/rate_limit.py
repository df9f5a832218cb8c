"""The MCP server's rate limit: at most ``MCP_RATE_LIMIT_PER_KEY`` requests per API key
in a window that starts with the key's first request (so a burst never straddles two
windows for twice the rate). The count lives in Redis, so every web process shares it;
over the limit a request is answered 429 with ``Retry-After`` (seconds until the window
ends). While Redis is unreachable requests go through unlimited, as the REST API's
throttles do (agentops/api/throttling.py), with a warning that limits are off."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from django.conf import settings
from redis.exceptions import RedisError

from agentops.outages import log_degraded

logger = logging.getLogger(__name__)

PERIOD_SECONDS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60}
PERIOD_SECONDS |= {"h": 3600, "hour": 3600, "d": 86400, "day": 86400}


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: int
    period: int
    retry_after: int = 0


def parse_rate(rate: str) -> tuple[int, int]:
    """``"600/min"`` -> (600, 60); the format is checked at start-up (settings.env_rate)."""
    count, _, unit = rate.partition("/")
    return int(count), PERIOD_SECONDS[unit]


class KeyRateLimit:
    """One Redis client per event loop (the ASGI lifespan makes it and closes it)."""

    def __init__(self):
        import redis.asyncio

        self.redis = redis.asyncio.Redis.from_url(settings.REDIS_URL)

    async def check(self, key_id: int) -> Verdict:
        limit, period = parse_rate(settings.MCP_RATE_LIMIT_PER_KEY)
        name = f"{settings.REDIS_KEY_PREFIX}:mcp-rate:{key_id}"
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.set(name, 0, ex=period, nx=True)
                pipe.incr(name)
                pipe.pttl(name)
                _created, count, ttl_ms = await pipe.execute()
        except RedisError as exc:
            log_degraded(logger, "MCP rate limits are not applied", exc)
            return Verdict(True, limit, period)
        if count <= limit:
            return Verdict(True, limit, period)
        return Verdict(False, limit, period, retry_after=max(1, math.ceil(ttl_ms / 1000)) if ttl_ms > 0 else period)

    async def close(self) -> None:
        await self.redis.aclose()
