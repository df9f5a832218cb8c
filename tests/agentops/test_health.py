"""/healthz and /readyz, and the Celery worker that readiness depends on."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.models import IdempotencyRecord
from agentops.scoping import dangerously_unscoped
from agentops.tasks import purge_expired_idempotency_keys


def test_healthz_answers_while_the_process_is_up(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_503_naming_celery_when_no_worker_answers(client):
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "failures": ["celery: no worker answered within 1 second"]}


@pytest.mark.django_db
def test_readyz_is_503_naming_redis_when_redis_is_unreachable(client, settings):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}
    }
    response = client.get("/readyz")
    assert response.status_code == 503
    failures = response.json()["failures"]
    assert failures[0].startswith("redis: ")
    assert failures[1] == "celery: not checked, its broker (Redis) is unreachable"


def test_readyz_is_200_with_database_redis_and_a_worker(client, celery_worker):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ready"}


def test_periodic_task_runs_on_a_real_worker(tenant, celery_worker, transactional_db):
    now = timezone.now()
    for key, expires in (("old", now - timedelta(minutes=1)), ("fresh", now + timedelta(hours=1))):
        IdempotencyRecord.dangerously_unscoped_objects.create(
            organization=tenant.organization, client="user:1", key=key, request_hash="h", expires_at=expires
        )
    assert purge_expired_idempotency_keys.delay().get(timeout=30) == 1
    with dangerously_unscoped("test"):
        assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["fresh"]


def test_tasks_default_to_late_acks_and_bounded_retries():
    from agentops.celery import app

    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    task = app.tasks["agentops.tasks.purge_expired_idempotency_keys"]
    assert task.acks_late and task.reject_on_worker_lost
    assert task.max_retries == 5 and task.retry_backoff and task.retry_jitter
    assert "purge-expired-idempotency-keys" in app.conf.beat_schedule
