"""Shared fixtures: an organization with an owner, an admin, a member and a viewer,
an outsider who belongs to another organization, projects, API keys and clients."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from agentops.models import ApiKey, Organization, Project
from agentops.roles import Role
from agentops.scoping import organization_scope
from agentops.services.api_keys import api_key_create
from tests.agentops.factories import MembershipFactory, OrganizationFactory, ProjectFactory, UserFactory
from tests.fake_mistral import fake_mistral  # noqa: F401 - a fixture for every test module
from tests.rebinding import rebinding  # noqa: F401 - a fixture for every test module
from tests.redirect_trap import redirect_trap  # noqa: F401 - a fixture for every test module
from tests.worker_thread import worker_thread


@pytest.fixture(scope="session", autouse=True)
def _test_database_released(django_db_setup, django_db_blocker):
    """Before the test database is dropped, end the sessions still connected to it:
    ``AsyncClient`` runs a sync view in a thread of its own and, as Django's test clients
    do, keeps ``close_old_connections`` from ending that request's connection, so the
    connection the thread borrowed from the pool is never given back and outlives the
    thread. Left connected, it made the drop fail ("is being accessed by other users")
    and left one test database behind in the data folder per run."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    connection.close()


@pytest.fixture(autouse=True)
def _channel_layer_of_this_test():
    """Each test gets the channel layer new. Channels keeps one layer per process, and
    channels_redis's layer keeps an asyncio lock per receiving channel that outlives
    its event loop when a receiver is cancelled while it waits for it (the lock's wait
    count is never given back, so the lock is never dropped). A server runs one event
    loop, where that is harmless; tests run one loop each, and a later test whose two
    consumers waited on that lock failed with "bound to a different event loop"."""
    from channels.layers import channel_layers

    channel_layers.backends = {}
    yield


@dataclass
class Tenant:
    organization: Organization
    project: Project
    owner: object
    admin: object
    member: object
    viewer: object

    def user(self, role: str):
        return getattr(self, role)


def _make_tenant(name: str) -> Tenant:
    organization = OrganizationFactory(name=name.title(), slug=name)
    users = {}
    for role in Role.values:
        user = UserFactory(email=f"{role}@{name}.example.com", username=f"{role}-{name}")
        MembershipFactory(organization=organization, user=user, role=role)
        users[role] = user
    project = ProjectFactory(organization=organization, name=f"{name} agent", slug="agent")
    return Tenant(organization=organization, project=project, **users)


@pytest.fixture
def tenant(db) -> Tenant:
    """The organization under test ("acme") with one user per role and a project."""
    return _make_tenant("acme")


@pytest.fixture
def other_tenant(db) -> Tenant:
    """Another organization ("globex"): its people are outsiders to ``tenant``."""
    return _make_tenant("globex")


@pytest.fixture
def outsider(other_tenant):
    """A user who belongs to another organization only."""
    return other_tenant.owner


@pytest.fixture
def signed_in(client):
    """Sign ``user`` in on the test client; the client."""

    def sign_in(user):
        client.force_login(user)
        return client

    return sign_in


@pytest.fixture
def api_client():
    return APIClient()


@pytest.fixture
def client_for():
    """An API client signed in as ``user`` (a session, like the browser)."""

    def make(user) -> APIClient:
        client = APIClient()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def make_api_key():
    """Create an API key; returns (key, plaintext)."""

    def make(project: Project, scopes=("ingest", "read", "execute"), **kwargs) -> tuple[ApiKey, str]:
        with organization_scope(project.organization):
            return api_key_create(
                project=project, actor=None, name=kwargs.pop("name", "ci"), scopes=list(scopes), **kwargs
            )

    return make


@pytest.fixture
def key_client(make_api_key):
    """An API client authenticated with a new key of ``project``."""

    def make(project: Project, scopes=("ingest", "read", "execute")) -> APIClient:
        _key, raw = make_api_key(project, scopes)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return make


@pytest.fixture
def celery_worker(transactional_db, settings):
    """A real Celery worker (in a thread of this process) consuming from the real Redis
    broker, with the test database committed so it sees the test's rows. It asks for
    ``settings`` so that the settings a test changed are put back only once the worker
    has stopped: a task still running at the test's end sees the test's settings."""
    with worker_thread() as app:
        yield app


DB_FIXTURES = {"db", "transactional_db", "live_server", "django_db_reset_sequences", "django_db_serialized_rollback"}


@pytest.fixture(autouse=True)
def _seeded_price_table(request):
    """Every test that uses the database finds the seeded price table and carbon
    factors, as a fresh install does: transactional tests empty all tables afterwards, migration data too."""
    from billing.services import prices_changed

    prices_changed()
    if request.node.get_closest_marker("django_db") is None and not DB_FIXTURES & set(request.fixturenames):
        yield
        return
    request.getfixturevalue("django_db_setup")
    from billing.models import EnergyFactor, Price
    from billing.seed import seed_catalog, seed_energy_factors

    with request.getfixturevalue("django_db_blocker").unblock():
        seed_catalog(Price)
        seed_energy_factors(EnergyFactor)
    yield
    prices_changed()


@pytest.fixture
def redis_down(settings, tmp_path, monkeypatch):
    """The cache, the channel layer and the live-listener counter pointed at a real Redis
    that was started and then stopped (connections are refused, as when Redis is down).
    Celery's broker stays the test run's: it is not on the paths these tests exercise."""
    from agentops import embedded, live

    server = embedded.EmbeddedRedis(tmp_path / "stopped-redis")
    url = server.acquire()
    server.release()  # the last user out stops it
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}}
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [url]}}
    }
    monkeypatch.setattr(live, "_listeners_seen", {})
    return url


@pytest.fixture
def broker_down(redis_down):
    """All of Redis down, Celery's broker included: ``redis_down``, and the Celery app
    publishing to the same stopped server (its connection and producer pools reset, so
    nothing already open to the test run's Redis is reused). Restored afterwards."""
    from kombu import pools as kombu_pools

    from agentops.celery import app

    def reset_pools():
        # Every pool that may hold a connection to the other server: the app's, the
        # producers' (kombu keeps them in a process-wide registry keyed by the URL) and
        # the control mailbox's; each is made again on first use.
        if app._pool is not None:
            app._pool.force_close_all()
        app._pool = None
        app.amqp._producer_pool = None
        kombu_pools.reset()
        app.__dict__.pop("control", None)

    previous = app.conf.broker_url
    app.conf.broker_url = redis_down
    reset_pools()
    yield redis_down
    app.conf.broker_url = previous
    reset_pools()
