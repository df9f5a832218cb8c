"""The MCP server's rate limit: at most ``MCP_RATE_LIMIT_PER_KEY`` requests per API key
in a window that starts with the key's first request, counted in Redis as the REST
API's throttles count (agentops.rate_limit), so every web process shares it; over the
limit a request is answered 429 with ``Retry-After`` (seconds until the window ends).
While Redis is unreachable requests go through unlimited, as the REST API's throttles
do, with a warning that limits are off."""

from __future__ import annotations

import logging

from django.conf import settings
from redis.exceptions import RedisError

from agentops.outages import log_degraded
from agentops.rate_limit import Verdict, count_request_async, parse_rate

logger = logging.getLogger(__name__)


class KeyRateLimit:
    """One Redis client per event loop (the ASGI lifespan makes it and closes it)."""

    def __init__(self):
        import redis.asyncio

        self.redis = redis.asyncio.Redis.from_url(settings.REDIS_URL)

    async def check(self, key_id: int) -> Verdict:
        limit, period = parse_rate(settings.MCP_RATE_LIMIT_PER_KEY)
        name = f"{settings.REDIS_KEY_PREFIX}:mcp-rate:{key_id}"
        try:
            return await count_request_async(self.redis, name, limit, period)
        except RedisError as exc:
            log_degraded(logger, "MCP rate limits are not applied", exc)
            return Verdict(True, limit, period)

    async def close(self) -> None:
        await self.redis.aclose()
