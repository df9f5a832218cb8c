"""Start-up checks shared by manage.py, the ASGI/WSGI apps and the Celery app.

A DATABASE_URL or REDIS_URL that cannot be reached stops the process with one line
that names the variable and the reason, instead of a traceback from deep inside a
driver. The embedded services report their own failures from agentops/embedded.py.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from agentops.embedded import fail

# Commands that never touch PostgreSQL or Redis, so they run where neither exists
# (for example `collectstatic` while a Docker image is built).
OFFLINE_COMMANDS = {"help", "version", "collectstatic", "check", "spectacular", "generate_encryption_key"}


def redact(url: str) -> str:
    """The URL without its password, safe to print."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


def database_problem(url: str, timeout: int = 5) -> str | None:
    """Why the PostgreSQL server at ``url`` cannot be used, or None when it can."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=timeout) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


def redis_problem(url: str, timeout: int = 5) -> str | None:
    """Why the Redis server at ``url`` cannot be used, or None when it can."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout).ping()
    except (redis.RedisError, ValueError) as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


def check_external_services(command: str = "") -> None:
    """Stop with one clear line when a configured server cannot be reached."""
    if command in OFFLINE_COMMANDS:
        return
    database_url = os.environ.get("DATABASE_URL", "")
    if database_url:
        problem = database_problem(database_url)
        if problem:
            fail(f"DATABASE_URL {redact(database_url)} cannot be reached: {problem}")
    redis_url = os.environ.get("REDIS_URL", "")
    if redis_url:
        problem = redis_problem(redis_url)
        if problem:
            fail(f"REDIS_URL {redact(redis_url)} cannot be reached: {problem}")
