"""Liveness and readiness for load balancers and orchestrators."""

from __future__ import annotations

from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache


@never_cache
def healthz(request):
    """200 whenever the process can answer."""
    return JsonResponse({"status": "ok"})


def _check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return f"database: {' '.join(str(exc).split()) or type(exc).__name__}"
    return None


def _check_redis() -> str | None:
    from django.core.cache import cache

    try:
        cache.get("readyz")
    except Exception as exc:  # noqa: BLE001
        return f"redis: {' '.join(str(exc).split()) or type(exc).__name__}"
    return None


def _check_workers() -> str | None:
    from agentops.celery import app

    try:
        replies = app.control.ping(timeout=1.0)
    except Exception as exc:  # noqa: BLE001
        return f"celery: {' '.join(str(exc).split()) or type(exc).__name__}"
    if not replies:
        return "celery: no worker answered within 1 second"
    return None


@never_cache
def readyz(request):
    """200 only when PostgreSQL, Redis and at least one Celery worker answer; else 503
    naming each failure."""
    failures = [problem for problem in (_check_database(), _check_redis()) if problem]
    if any(problem.startswith("redis") for problem in failures):
        failures.append("celery: not checked, its broker (Redis) is unreachable")
    elif problem := _check_workers():
        failures.append(problem)
    if failures:
        return JsonResponse({"status": "unavailable", "failures": failures}, status=503)
    return JsonResponse({"status": "ready"})
