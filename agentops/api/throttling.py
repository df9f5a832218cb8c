"""Rate limits per API key and per signed-in user (rates in settings, from the environment).

DRF's throttle classes read the rates (``THROTTLE_RATES``); the counting is
``agentops.rate_limit``'s (one atomic round trip to Redis, in a window that starts with
the first request): DRF's own kept every request's time in the cache and wrote the whole
list back, so a busy key paid for a thousand timestamps on each request, and two
processes writing at once lost one's count. While Redis is unreachable, requests are
let through unlimited rather than refused: ingestion stores into PostgreSQL and must
keep accepting data when Redis alone is down (a warning says the limits are off)."""

import logging

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

from agentops import rate_limit
from agentops.models import ApiKey
from agentops.outages import log_degraded

logger = logging.getLogger(__name__)


def _cache_redis_url() -> str:
    """The cache's Redis, where DRF's throttle kept its counts: the first of its
    locations (Django's Redis cache writes to the first of several)."""
    location = settings.CACHES["default"]["LOCATION"]
    servers = location.split(",") if isinstance(location, str) else location
    return servers[0].strip()


class _RedisRateThrottle(SimpleRateThrottle):
    verdict: rate_limit.Verdict | None = None

    @property
    def cache_format(self) -> str:
        return f"{settings.REDIS_KEY_PREFIX}:rate:%(scope)s:%(ident)s"

    def allow_request(self, request, view):
        if self.rate is None:
            return True
        name = self.get_cache_key(request, view)
        if name is None:
            return True
        try:
            self.verdict = rate_limit.count_request(_cache_redis_url(), name, self.num_requests, self.duration)
        except RedisError as exc:
            log_degraded(logger, "rate limits are not applied", exc)
            return True
        return self.verdict.allowed

    def wait(self):
        return self.verdict.retry_after if self.verdict is not None else None


class ApiKeyRateThrottle(_RedisRateThrottle):
    scope = "api_key"

    def get_cache_key(self, request, view):
        if not isinstance(request.auth, ApiKey):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class UserRateThrottle(_RedisRateThrottle):
    scope = "user"

    def get_cache_key(self, request, view):
        if isinstance(request.auth, ApiKey) or not request.user or not request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}
