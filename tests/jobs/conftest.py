"""Fixtures of the job services' tests (tests/jobs/test_services_*.py): a scripted
backend that every job service builds, and a backend row of the tenant's. A module
defining its own fixture of the same name uses its own."""

import pytest

from tests.jobs.factories import ScriptedBackend, build_backends_with, make_backend


@pytest.fixture
def scripted(monkeypatch):
    ScriptedBackend.reset()
    build_backends_with(
        monkeypatch,
        backend_for=lambda backend: ScriptedBackend(config={}, credentials={}),
        backend_class=lambda kind: ScriptedBackend,
    )
    return ScriptedBackend


@pytest.fixture
def backend(tenant):
    return make_backend(tenant.organization)
