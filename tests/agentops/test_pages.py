"""The server-rendered pages of the core: who may see and do what, tenant isolation,
and each page's main behaviour through the real views, services and templates."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.staticfiles import finders
from django.core import mail
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.views import APIView

from agentops.api.base import OrganizationEndpoint, ProjectEndpoint
from agentops.models import ApiKey, AuditEvent, Invitation, Membership, Organization, Project, ProviderSecret
from agentops.pages import Need, OrganizationPage, ProjectPage, SignedInPage
from agentops.roles import Role
from agentops.scoping import organization_scope
from agentops.services.api_keys import api_key_create
from agentops.services.audit import audit_record
from agentops.services.invitations import invitation_create
from agentops.services.secrets import provider_secret_set
from jobs.api.views import JobTokenEndpoint
from runs.api.otlp import OtlpExportView
from tests.agentops.factories import MembershipFactory, OrganizationFactory, UserFactory
from tests.agentops.test_api_core import wait_for_mail

ORG = "/o/acme"
PROJECT = "/o/acme/p/agent"


def audit_count(organization) -> int:
    with organization_scope(organization):
        return AuditEvent.objects.count()


def membership_of(organization, user) -> Membership | None:
    with organization_scope(organization):
        return Membership.objects.filter(user=user).first()


def text(response) -> str:
    return response.content.decode()


@pytest.fixture
def signed_in(client):
    """Sign ``client`` in as ``user`` and return it."""

    def sign_in(user):
        client.force_login(user)
        return client

    return sign_in


@dataclass
class Objects:
    """One object of each kind in the tenant, for URLs that name one."""

    key: ApiKey
    invitation: Invitation
    member: Membership


@pytest.fixture
def objects(tenant) -> Objects:
    with organization_scope(tenant.organization):
        key, _raw = api_key_create(project=tenant.project, actor=tenant.owner, name="ci", scopes=["ingest"])
        invitation, _token = invitation_create(
            actor_membership=Membership.objects.get(user=tenant.owner),
            email="invitee@example.com",
            role=Role.MEMBER,
            base_url="http://testserver/",
        )
        provider_secret_set(
            organization=tenant.organization, actor=tenant.owner, provider="mistral", api_key="sk-existing-9876"
        )
        member = Membership.objects.get(user=tenant.member)
    return Objects(key=key, invitation=invitation, member=member)


# --- Which role sees which page ---------------------------------------------------

# page -> the lowest role allowed to open it
PAGES = {
    f"{ORG}/": Role.VIEWER,
    f"{ORG}/members/": Role.VIEWER,
    f"{ORG}/settings/": Role.ADMIN,
    f"{ORG}/secrets/": Role.ADMIN,
    f"{ORG}/audit/": Role.ADMIN,
    f"{ORG}/billing/": Role.ADMIN,
    f"{PROJECT}/": Role.VIEWER,
    f"{PROJECT}/api-keys/": Role.ADMIN,
    f"{PROJECT}/runs/": Role.VIEWER,
    f"{PROJECT}/evals/": Role.VIEWER,
    f"{PROJECT}/jobs/": Role.VIEWER,
}
ROLE_BELOW = {Role.ADMIN: Role.MEMBER}


@pytest.mark.parametrize(("path", "role"), PAGES.items())
def test_page_renders_for_the_lowest_role_allowed(signed_in, tenant, path, role):
    response = signed_in(tenant.user(role)).get(path)

    assert response.status_code == 200
    assert tenant.organization.name in text(response)


@pytest.mark.parametrize("path", [path for path, role in PAGES.items() if role in ROLE_BELOW])
def test_page_is_forbidden_with_the_reason_below_the_role_it_needs(signed_in, tenant, path):
    response = signed_in(tenant.member).get(path)

    assert response.status_code == 403
    assert "Your role (member) does not allow you to" in text(response)


@pytest.mark.parametrize("path", PAGES)
def test_a_nul_character_in_a_query_parameter_is_a_400_page_naming_it(signed_in, tenant, path):
    response = signed_in(tenant.owner).get(path, {"page": "1\x00"})

    assert response.status_code == 400
    assert "Page: contains a NUL character, which cannot be stored" in text(response)


@pytest.mark.parametrize("path", [*PAGES, "/"])
def test_signed_out_visitor_is_sent_to_login(client, tenant, path):
    response = client.get(path)

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_login_redirect_brings_the_visitor_back_to_the_page(client, tenant):
    response = client.get(f"{PROJECT}/api-keys/")

    assert response["Location"] == f"/accounts/login/?next={PROJECT}/api-keys/"


# --- Tenant isolation -------------------------------------------------------------


def org_and_project_urls(objects: Objects, org_slug="acme") -> list[tuple[str, str]]:
    """Every (method, path) of the organization and project pages, naming real objects."""
    org, project = f"/o/{org_slug}", f"/o/{org_slug}/p/agent"
    gets = [path.replace("/o/acme", org) for path in PAGES]
    posts = [
        f"{org}/",
        f"{org}/members/",
        f"{org}/members/leave/",
        f"{org}/members/{objects.member.pk}/role/",
        f"{org}/members/{objects.member.pk}/remove/",
        f"{org}/invitations/{objects.invitation.pk}/revoke/",
        f"{org}/settings/",
        f"{org}/settings/transfer/",
        f"{org}/settings/delete/",
        f"{org}/secrets/",
        f"{org}/secrets/mistral/delete/",
        f"{project}/",
        f"{project}/delete/",
        f"{project}/api-keys/",
        f"{project}/api-keys/{objects.key.pk}/revoke/",
    ]
    return [("get", path) for path in gets] + [("post", path) for path in posts]


def test_outsider_gets_404_on_every_organization_and_project_page(signed_in, tenant, objects, outsider):
    client = signed_in(outsider)
    before = audit_count(tenant.organization)

    for method, path in org_and_project_urls(objects):
        data = {"confirm": "acme", "role": "owner", "name": "Hijacked", "membership": objects.member.pk}
        response = getattr(client, method)(path, data) if method == "post" else client.get(path)
        assert response.status_code == 404, f"{method.upper()} {path} answered {response.status_code}"
        assert "acme" not in text(response).lower(), f"{method.upper()} {path} leaks the organization"

    assert audit_count(tenant.organization) == before
    assert Organization.objects.filter(slug="acme", name="Acme").exists()


def test_another_tenants_organization_looks_exactly_like_a_missing_one(signed_in, tenant, other_tenant):
    client = signed_in(tenant.owner)

    foreign = client.get("/o/globex/")
    missing = client.get("/o/no-such-org/")

    assert foreign.status_code == missing.status_code == 404
    assert [t.name for t in foreign.templates] == [t.name for t in missing.templates]


def test_another_tenants_project_is_404_even_for_a_member_of_the_url_organization(signed_in, tenant, other_tenant):
    # globex has a project "agent" too: the slug resolves only inside acme.
    response = signed_in(tenant.owner).get("/o/acme/p/no-such-project/")

    assert response.status_code == 404


def test_object_ids_of_another_organization_are_404_under_ones_own(signed_in, tenant, other_tenant):
    with organization_scope(other_tenant.organization):
        foreign_key, _raw = api_key_create(project=other_tenant.project, actor=None, name="x", scopes=["read"])
        foreign_member = Membership.objects.get(user=other_tenant.member)
    client = signed_in(tenant.owner)

    revoke = client.post(f"{PROJECT}/api-keys/{foreign_key.pk}/revoke/")
    role = client.post(f"{ORG}/members/{foreign_member.pk}/role/", {"role": "viewer"})

    assert revoke.status_code == role.status_code == 404
    foreign_key.refresh_from_db()
    foreign_member.refresh_from_db()
    assert foreign_key.revoked_at is None
    assert foreign_member.role == Role.MEMBER


# The routes served by neither the scoped API endpoints (agentops/api/base.py) nor the
# scoped pages (agentops/pages.py), each with the base it has instead and why. None names
# an organization or a project: those always go through the scoped bases.
UNSCOPED_ROUTES = {
    "healthz": (None, "the load balancer's probe: no user, no tenant data"),
    "readyz": (None, "the load balancer's probe: no user, no tenant data"),
    "favicon.ico": (RedirectView, "the browser's icon: a redirect to a static file"),
    "": (None, "home: sends a visitor to the login page, a member to their first organization"),
    "api/schema/": (SpectacularAPIView, "the public OpenAPI schema of the API"),
    "api/docs/": (SpectacularSwaggerSplitView, "the API docs page showing that schema"),
    "api/v1/me/": (APIView, "the signed-in user themself, outside any organization"),
    "api/v1/organizations/": (APIView, "the user's own organizations, and creating one"),
    "api/v1/invitations/accept/": (APIView, "accepting an invitation sent to the user, before membership"),
    "api/v1/otlp/v1/traces": (OtlpExportView, "OTLP receiver: the API key names its project (run:ingest)"),
    "api/v1/otlp/v1/logs": (OtlpExportView, "OTLP receiver: the API key names its project (run:ingest)"),
    "api/v1/jobs/<int:job_id>/items/": (JobTokenEndpoint, "a job's own token, for that job only"),
    "api/v1/jobs/<int:job_id>/results/": (JobTokenEndpoint, "a job's own token, for that job only"),
}
# Whole trees mounted from libraries: the Django admin (staff only, across organizations by
# design: tests/agentops/test_admin.py) and allauth's sign-in, sign-up and password pages.
# Static files are served outside the URLconf (tests/agentops/test_staticfinders.py).
UNSCOPED_TREES = ("admin/", "accounts/")
# Server-Sent Events streams: async function views (no DRF, no thread per client) that
# resolve the caller's access with agentops.access as the endpoints do, before streaming
# (runs/sse.py; isolation and roles in tests/runs/test_sse.py).
STREAM_ROUTES = {
    "api/v1/projects/<slug:org_slug>/<slug:project_slug>/agent-sessions/<int:session_id>/events/": "session_events",
    "api/v1/projects/<slug:org_slug>/<slug:project_slug>/runs/<int:run_id>/events/": "run_events",
}


def _routes(patterns=None, prefix=""):
    """Every route of the URLconf, with the class serving it (None for a function view)."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), getattr(pattern.callback, "view_class", None)


def test_every_route_is_served_by_a_scoped_api_endpoint_or_page():
    """An API route that is not an OrganizationEndpoint, or a page that is not an
    OrganizationPage, could skip the access check; one naming a project must check it."""
    routes = dict(_routes())
    problems = []
    for route, view_class in routes.items():
        if route.startswith(UNSCOPED_TREES):
            continue
        if route in STREAM_ROUTES:
            from runs import sse

            if view_class is not None or not hasattr(sse, STREAM_ROUTES[route]):
                problems.append(f"{route}: listed as an event stream of runs/sse.py, is {view_class}")
            continue
        if route in UNSCOPED_ROUTES:
            base, _why = UNSCOPED_ROUTES[route]
            if "<slug:org_slug>" in route or not (base is None or (view_class and issubclass(view_class, base))):
                problems.append(f"{route}: listed as served by {base}, is {view_class}")
            continue
        api = route.startswith("api/")
        scoped = (OrganizationEndpoint, ProjectEndpoint) if api else (OrganizationPage, ProjectPage)
        wanted = scoped[1] if "<slug:project_slug>" in route else scoped[0]
        if not api and "<slug:org_slug>" not in route:
            wanted = (OrganizationPage, SignedInPage)  # a page outside any organization
        if view_class is None or not issubclass(view_class, wanted):
            problems.append(f"{route}: {view_class} is not a {wanted}")
    assert problems == []
    assert sorted(set(UNSCOPED_ROUTES) - set(routes)) == [], "listed exceptions that are no route"
    assert sum(route.startswith("api/v1/") for route in routes) >= 60 and len(routes) >= 150


def test_the_browsers_icon_is_the_platforms_on_every_page_and_at_favicon_ico(db, client):
    # Without one, every browser logs a 404 for /favicon.ico once per visit.
    icon = re.search(r'<link rel="icon" href="([^"]+)"', client.get("/accounts/login/").content.decode()).group(1)
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == icon
    assert icon.endswith(".svg") and finders.find("agentops/favicon.svg")


def test_a_page_that_overrides_dispatch_is_refused_when_defined():
    with pytest.raises(TypeError, match="overrides dispatch"):

        class Sneaky(OrganizationPage):
            permissions = {"GET": Need("org:read", "look")}

            def dispatch(self, request, *args, **kwargs):
                return super().dispatch(request, *args, **kwargs)


def test_method_without_a_declared_permission_is_not_allowed(signed_in, tenant):
    response = signed_in(tenant.owner).post(f"{ORG}/audit/")

    assert response.status_code == 405


# --- Service errors a handler lets through -----------------------------------------------

REFUSALS = [
    ("invalid", 400, "The name must not be empty."),
    ("forbidden", 403, "Only an owner may do that."),
    ("not_found", 404, "There is nothing here"),
    ("conflict", 409, "That name is taken."),
    ("budget", 402, "The monthly budget is spent."),
]


@pytest.mark.urls("tests.agentops.refusing_page_urls")
@pytest.mark.parametrize(("error", "status", "shown"), REFUSALS)
def test_a_service_error_a_page_does_not_catch_answers_its_status_and_message_not_500(
    signed_in, tenant, error, status, shown
):
    client = signed_in(tenant.member)

    for response in (
        client.get(f"{PROJECT}/refusing/", {"error": error}),
        client.post(f"{PROJECT}/refusing/", {"error": error}),
    ):
        assert response.status_code == status
        assert shown in text(response)
        if status != 404:  # the 404 page is the same for anything not found or not yours
            assert tenant.organization.name in text(response)  # in the organization's layout


@pytest.mark.urls("tests.agentops.refusing_page_urls")
@pytest.mark.parametrize(("error", "status", "shown"), REFUSALS)
def test_a_service_error_a_signed_in_page_does_not_catch_answers_its_status_and_message(
    signed_in, tenant, error, status, shown
):
    response = signed_in(tenant.member).get("/refusing/", {"error": error})

    assert response.status_code == status
    assert shown in text(response)


# --- Viewers cannot write -----------------------------------------------------------

VIEWER_WRITES = [
    (f"{ORG}/", {"name": "New project"}),
    (f"{ORG}/members/", {"email": "someone@example.com", "role": "viewer"}),
    ("{ORG}/members/{member}/role/", {"role": "admin"}),
    ("{ORG}/members/{member}/remove/", {}),
    ("{ORG}/invitations/{invitation}/revoke/", {}),
    (f"{ORG}/settings/", {"name": "Renamed"}),
    (f"{ORG}/settings/transfer/", {"membership": "0"}),
    (f"{ORG}/settings/delete/", {"confirm": "acme"}),
    (f"{ORG}/secrets/", {"provider": "mistral", "api_key": "sk-viewer-12345678"}),
    (f"{ORG}/secrets/mistral/delete/", {}),
    (f"{PROJECT}/", {"name": "Renamed"}),
    (f"{PROJECT}/delete/", {"confirm": "agent"}),
    (f"{PROJECT}/api-keys/", {"name": "sneaky", "scopes": ["read"]}),
    ("{PROJECT}/api-keys/{key}/revoke/", {}),
]


@pytest.mark.parametrize(("path", "data"), VIEWER_WRITES)
def test_viewer_cannot_write_and_nothing_changes(signed_in, tenant, objects, path, data):
    path = path.format(
        ORG=ORG, PROJECT=PROJECT, member=objects.member.pk, invitation=objects.invitation.pk, key=objects.key.pk
    )
    before = audit_count(tenant.organization)

    response = signed_in(tenant.viewer).post(path, data)

    assert response.status_code == 403
    assert "Your role (viewer) does not allow you to" in text(response)
    # Every write the services make is audited: no new event means nothing changed.
    assert audit_count(tenant.organization) == before


def test_viewer_cannot_revoke_api_key(signed_in, tenant, objects):
    response = signed_in(tenant.viewer).post(f"{PROJECT}/api-keys/{objects.key.pk}/revoke/")

    assert response.status_code == 403
    objects.key.refresh_from_db()
    assert objects.key.revoked_at is None


# --- Home and organizations -----------------------------------------------------------


def test_home_sends_a_member_to_their_first_organization(signed_in, tenant):
    zeta = OrganizationFactory(name="Zeta", slug="zeta")
    MembershipFactory(organization=zeta, user=tenant.viewer, role=Role.OWNER)

    response = signed_in(tenant.viewer).get("/")

    assert response.status_code == 302
    assert response["Location"] == "/o/acme/"


def test_home_welcomes_a_user_without_organization_with_a_create_form(signed_in, db):
    response = signed_in(UserFactory()).get("/")

    assert response.status_code == 200
    assert "Create your first organization" in text(response)
    assert 'action="/orgs/new/"' in text(response)


def test_creating_an_organization_makes_the_creator_its_owner(signed_in, db):
    user = UserFactory()

    response = signed_in(user).post("/orgs/new/", {"name": "Initech Labs", "slug": ""})

    assert response.status_code == 302
    assert response["Location"] == "/o/initech-labs/"
    organization = Organization.objects.get(slug="initech-labs")
    assert membership_of(organization, user).role == Role.OWNER
    assert "You are its owner" in text(signed_in(user).get(response["Location"]))


def test_creating_an_organization_with_a_taken_slug_shows_the_error(signed_in, tenant):
    response = signed_in(tenant.owner).post("/orgs/new/", {"name": "Another", "slug": "acme"})

    assert response.status_code == 400
    assert "The slug &#x27;acme&#x27; is taken" in text(response)
    assert Organization.objects.filter(slug="acme").count() == 1


def test_organization_overview_lists_projects_and_offers_new_project_to_admins(signed_in, tenant):
    admin_page = text(signed_in(tenant.admin).get(f"{ORG}/"))
    viewer_page = text(signed_in(tenant.viewer).get(f"{ORG}/"))

    assert "acme agent" in admin_page and "acme agent" in viewer_page
    assert "New project" in admin_page
    assert "New project" not in viewer_page


def test_admin_creates_a_project(signed_in, tenant):
    response = signed_in(tenant.admin).post(f"{ORG}/", {"name": "Support bot", "slug": ""})

    assert response.status_code == 302
    assert response["Location"] == f"{ORG}/p/support-bot/"
    with organization_scope(tenant.organization):
        assert Project.objects.filter(slug="support-bot", name="Support bot").exists()


def test_creating_a_project_with_a_taken_slug_shows_the_error_instead_of_failing(signed_in, tenant):
    response = signed_in(tenant.admin).post(f"{ORG}/", {"name": "Agent", "slug": "agent"})

    assert response.status_code == 400
    assert "A project with the slug &#x27;agent&#x27; already exists" in text(response)


# --- Project pages ------------------------------------------------------------------


def test_project_overview_shows_how_to_send_traces_and_opens_a_live_connection(signed_in, tenant):
    page = text(signed_in(tenant.viewer).get(f"{PROJECT}/"))

    assert "http://testserver/api/v1/otlp" in page
    assert "Authorization: Bearer &lt;key&gt;" in page
    assert 'hx-ext="ws" ws-connect="/ws/o/acme/p/agent/"' in page
    assert "django_htmx/ext/hx-ws-2.min.js" in page
    for section in ("/runs/", "/evals/", "/jobs/"):
        assert f'href="{PROJECT}{section}"' in page


def test_admin_renames_a_project(signed_in, tenant):
    response = signed_in(tenant.admin).post(f"{PROJECT}/", {"name": "Renamed agent"})

    assert response.status_code == 302
    tenant.project.refresh_from_db()
    assert tenant.project.name == "Renamed agent"
    assert tenant.project.slug == "agent"


def test_deleting_a_project_needs_its_slug_typed(signed_in, tenant):
    client = signed_in(tenant.admin)

    refused = client.post(f"{PROJECT}/delete/", {"confirm": "wrong"})
    deleted = client.post(f"{PROJECT}/delete/", {"confirm": "agent"})

    assert refused.status_code == 400
    assert "type the project&#x27;s slug" in text(refused)
    assert deleted.status_code == 302
    with organization_scope(tenant.organization):
        assert not Project.objects.filter(slug="agent").exists()


def test_runs_page_is_an_empty_state_explaining_how_to_send_traces(signed_in, tenant):
    admin_page = text(signed_in(tenant.admin).get(f"{PROJECT}/runs/"))
    viewer_page = text(signed_in(tenant.viewer).get(f"{PROJECT}/runs/"))

    assert "No runs yet" in admin_page
    assert "http://testserver/api/v1/otlp" in admin_page
    assert "Authorization: Bearer &lt;key&gt;" in admin_page
    assert f'href="{PROJECT}/api-keys/"' in admin_page
    # A viewer cannot open the keys page, so is told whom to ask instead.
    assert f'href="{PROJECT}/api-keys/"' not in viewer_page
    assert "Ask an owner or admin for an API key" in viewer_page


@pytest.mark.parametrize(
    ("path", "heading"),
    [
        # Evaluations is no longer coming: tests/evals/test_dataset_pages.py covers its home.
        (f"{PROJECT}/jobs/", "No jobs yet"),
    ],
)
def test_coming_sections_say_so(signed_in, tenant, path, heading):
    assert heading in text(signed_in(tenant.owner).get(path))


# --- API keys -----------------------------------------------------------------------


def test_created_api_key_is_shown_once_and_only_its_hash_is_stored(signed_in, tenant):
    client = signed_in(tenant.admin)

    created = client.post(f"{PROJECT}/api-keys/", {"name": "exporter", "scopes": ["ingest", "read"]})

    assert created.status_code == 200
    assert created["Cache-Control"] == "no-store"
    raw_key = re.search(r'id="new-api-key"[^>]*>(ao_[^<]+)<', text(created)).group(1)
    with organization_scope(tenant.organization):
        key = ApiKey.objects.get(name="exporter")
    assert key.key_hash == hashlib.sha256(raw_key.encode()).hexdigest()
    assert key.scopes == ["ingest", "read"]
    listing = text(client.get(f"{PROJECT}/api-keys/"))
    assert raw_key not in listing
    assert f"{key.prefix}…" in listing


def test_api_key_row_stores_no_plaintext(signed_in, tenant):
    created = signed_in(tenant.admin).post(f"{PROJECT}/api-keys/", {"name": "exporter", "scopes": ["ingest"]})
    raw_key = re.search(r'id="new-api-key"[^>]*>(ao_[^<]+)<', text(created)).group(1)

    row = ApiKey.dangerously_unscoped_objects.filter(name="exporter").values().get()

    assert all(raw_key not in str(value) for value in row.values())
    assert raw_key.startswith(row["prefix"])


def test_api_key_with_an_expiry_works_through_the_chosen_day(signed_in, tenant):
    day = (timezone.now() + timedelta(days=10)).date()

    signed_in(tenant.admin).post(
        f"{PROJECT}/api-keys/", {"name": "temporary", "scopes": ["read"], "expires_on": day.isoformat()}
    )

    key = ApiKey.dangerously_unscoped_objects.get(name="temporary")
    assert key.expires_at.date() == day + timedelta(days=1)
    assert (key.expires_at.hour, key.expires_at.minute) == (0, 0)


def test_api_key_valid_until_the_last_day_of_the_calendar_is_a_form_error(signed_in, tenant):
    response = signed_in(tenant.admin).post(
        f"{PROJECT}/api-keys/", {"name": "forever", "scopes": ["read"], "expires_on": "9999-12-31"}
    )

    assert response.status_code == 400
    assert "Choose a day before 9999-12-31, or leave it empty for a key that does not expire." in text(response)
    assert not ApiKey.dangerously_unscoped_objects.filter(name="forever").exists()


def test_api_key_without_scopes_is_refused_with_a_form_error(signed_in, tenant):
    response = signed_in(tenant.admin).post(f"{PROJECT}/api-keys/", {"name": "nothing"})

    assert response.status_code == 400
    assert "This field is required" in text(response)
    assert not ApiKey.dangerously_unscoped_objects.filter(name="nothing").exists()


def test_admin_revokes_an_api_key(signed_in, tenant, objects):
    client = signed_in(tenant.admin)

    response = client.post(f"{PROJECT}/api-keys/{objects.key.pk}/revoke/", follow=True)

    objects.key.refresh_from_db()
    assert objects.key.revoked_at is not None
    assert f"The key {objects.key.prefix}… (“ci”) was revoked." in text(response)
    assert "Revoked" in text(response)


def test_revoking_a_revoked_key_shows_the_services_message(signed_in, tenant, objects):
    client = signed_in(tenant.admin)
    client.post(f"{PROJECT}/api-keys/{objects.key.pk}/revoke/")

    again = client.post(f"{PROJECT}/api-keys/{objects.key.pk}/revoke/", follow=True)

    assert again.status_code == 200
    assert "this key is already revoked" in text(again)


def test_key_of_another_project_cannot_be_revoked_through_this_projects_url(signed_in, tenant):
    other_project = Project.dangerously_unscoped_objects.create(organization=tenant.organization, name="B", slug="b")
    with organization_scope(tenant.organization):
        key, _raw = api_key_create(project=other_project, actor=None, name="b-key", scopes=["read"])

    response = signed_in(tenant.owner).post(f"{PROJECT}/api-keys/{key.pk}/revoke/")

    assert response.status_code == 404
    key.refresh_from_db()
    assert key.revoked_at is None


# --- Members and invitations ---------------------------------------------------------


def test_members_page_lists_members_with_roles(signed_in, tenant):
    page = text(signed_in(tenant.viewer).get(f"{ORG}/members/"))

    for role in Role.values:
        assert f"{role}@acme.example.com" in page
    assert "Invite someone" not in page


def test_admin_is_offered_only_roles_they_may_assign(signed_in, tenant):
    admin_page = text(signed_in(tenant.admin).get(f"{ORG}/members/"))
    owner_page = text(signed_in(tenant.owner).get(f"{ORG}/members/"))

    invite_form = admin_page[admin_page.index('id="invite"') :]
    assert '<option value="owner"' not in invite_form
    assert '<option value="admin"' in invite_form
    assert '<option value="owner"' in owner_page[owner_page.index('id="invite"') :]


def test_admin_cannot_invite_an_owner(signed_in, tenant):
    response = signed_in(tenant.admin).post(f"{ORG}/members/", {"email": "boss@example.com", "role": "owner"})

    assert response.status_code == 400
    assert not Invitation.dangerously_unscoped_objects.filter(email="boss@example.com").exists()


def test_invitation_is_emailed_and_accepted_by_the_invited_address(signed_in, client, tenant, celery_worker):
    response = signed_in(tenant.admin).post(f"{ORG}/members/", {"email": "New.Person@example.com", "role": "member"})
    assert response.status_code == 302
    wait_for_mail(1)
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["new.person@example.com"]
    link = re.search(r"http://testserver(/invitations/[^/\s]+/)", mail.outbox[0].body).group(1)

    newcomer = UserFactory(email="new.person@example.com")
    client.force_login(newcomer)
    page = client.get(link)
    accepted = client.post(link)

    assert page.status_code == 200
    assert "Join Acme" in text(page) and "Member" in text(page)
    assert accepted.status_code == 302
    assert accepted["Location"] == f"{ORG}/"
    assert membership_of(tenant.organization, newcomer).role == Role.MEMBER
    assert "you joined as member" in text(client.get(accepted["Location"]))


def test_invitation_cannot_be_accepted_by_another_address(signed_in, tenant):
    with organization_scope(tenant.organization):
        _invitation, token = invitation_create(
            actor_membership=Membership.objects.get(user=tenant.owner),
            email="invited@example.com",
            role=Role.ADMIN,
            base_url="http://testserver/",
        )
    stranger = UserFactory(email="stranger@example.com")

    response = signed_in(stranger).post(f"/invitations/{token}/")

    assert response.status_code == 403
    assert "This invitation is for invited@example.com" in text(response)
    assert membership_of(tenant.organization, stranger) is None


def test_invitation_with_an_unverified_matching_address_is_refused(signed_in, tenant):
    with organization_scope(tenant.organization):
        _invitation, token = invitation_create(
            actor_membership=Membership.objects.get(user=tenant.owner),
            email="unverified@example.com",
            role=Role.MEMBER,
            base_url="http://testserver/",
        )
    user = UserFactory(email="unverified@example.com", verified_email=False)

    response = signed_in(user).post(f"/invitations/{token}/")

    assert response.status_code == 403
    assert membership_of(tenant.organization, user) is None


def test_revoked_invitation_says_so_and_offers_no_accept_button(signed_in, tenant, objects):
    with organization_scope(tenant.organization):
        _invitation, token = invitation_create(
            actor_membership=Membership.objects.get(user=tenant.owner),
            email="late@example.com",
            role=Role.MEMBER,
            base_url="http://testserver/",
        )
    client = signed_in(tenant.admin)
    invitation = Invitation.dangerously_unscoped_objects.get(email="late@example.com")
    client.post(f"{ORG}/invitations/{invitation.pk}/revoke/")
    late = UserFactory(email="late@example.com")

    page = signed_in(late).get(f"/invitations/{token}/")
    accept = signed_in(late).post(f"/invitations/{token}/")

    assert "This invitation is revoked" in text(page)
    assert "Accept and join" not in text(page)
    assert accept.status_code == 409
    assert membership_of(tenant.organization, late) is None


def test_unknown_invitation_token_is_404(signed_in, tenant):
    assert signed_in(tenant.viewer).get("/invitations/not-a-real-token/").status_code == 404


def test_signed_out_invitation_link_goes_to_login_and_back(client, db):
    response = client.get("/invitations/some-token/")

    assert response["Location"] == "/accounts/login/?next=/invitations/some-token/"


def test_admin_revokes_an_open_invitation(signed_in, tenant, objects):
    response = signed_in(tenant.admin).post(f"{ORG}/invitations/{objects.invitation.pk}/revoke/", follow=True)

    objects.invitation.refresh_from_db()
    assert objects.invitation.revoked_at is not None
    assert "The invitation of invitee@example.com was revoked." in text(response)


def test_owner_changes_a_members_role(signed_in, tenant, objects):
    response = signed_in(tenant.owner).post(f"{ORG}/members/{objects.member.pk}/role/", {"role": "admin"}, follow=True)

    objects.member.refresh_from_db()
    assert objects.member.role == Role.ADMIN
    assert "member@acme.example.com is now admin." in text(response)


def test_admin_cannot_change_an_owners_role_and_is_told_why(signed_in, tenant):
    owner_membership = membership_of(tenant.organization, tenant.owner)

    response = signed_in(tenant.admin).post(
        f"{ORG}/members/{owner_membership.pk}/role/", {"role": "viewer"}, follow=True
    )

    owner_membership.refresh_from_db()
    assert owner_membership.role == Role.OWNER
    assert "only an owner can grant, change or remove the owner role" in text(response)


def test_admin_removes_a_member(signed_in, tenant, objects):
    signed_in(tenant.admin).post(f"{ORG}/members/{objects.member.pk}/remove/")

    assert membership_of(tenant.organization, tenant.member) is None


def test_last_owner_cannot_leave_and_sees_why(signed_in, tenant):
    response = signed_in(tenant.owner).post(f"{ORG}/members/leave/", follow=True)

    assert membership_of(tenant.organization, tenant.owner) is not None
    assert "the last owner cannot leave" in text(response)


def test_viewer_leaves_the_organization(signed_in, tenant):
    response = signed_in(tenant.viewer).post(f"{ORG}/members/leave/")

    assert response["Location"] == "/"
    assert membership_of(tenant.organization, tenant.viewer) is None
    assert signed_in(tenant.viewer).get(f"{ORG}/").status_code == 404


# --- Organization settings -------------------------------------------------------------


def test_admin_renames_the_organization(signed_in, tenant):
    signed_in(tenant.admin).post(f"{ORG}/settings/", {"name": "Acme Corporation"})

    tenant.organization.refresh_from_db()
    assert tenant.organization.name == "Acme Corporation"


def test_admin_sees_no_transfer_or_delete_and_cannot_post_them(signed_in, tenant):
    client = signed_in(tenant.admin)
    page = text(client.get(f"{ORG}/settings/"))

    transfer = client.post(
        f"{ORG}/settings/transfer/", {"membership": membership_of(tenant.organization, tenant.admin).pk}
    )
    delete = client.post(f"{ORG}/settings/delete/", {"confirm": "acme"})

    assert "Transfer ownership" not in page and "Delete organization" not in page
    assert transfer.status_code == delete.status_code == 403
    assert Organization.objects.filter(slug="acme").exists()
    assert membership_of(tenant.organization, tenant.owner).role == Role.OWNER


def test_owner_transfers_ownership_and_becomes_admin(signed_in, tenant):
    admin_membership = membership_of(tenant.organization, tenant.admin)

    signed_in(tenant.owner).post(f"{ORG}/settings/transfer/", {"membership": admin_membership.pk})

    assert membership_of(tenant.organization, tenant.admin).role == Role.OWNER
    assert membership_of(tenant.organization, tenant.owner).role == Role.ADMIN


def test_deleting_the_organization_needs_its_slug_typed(signed_in, tenant):
    client = signed_in(tenant.owner)

    refused = client.post(f"{ORG}/settings/delete/", {"confirm": "ACME"})
    deleted = client.post(f"{ORG}/settings/delete/", {"confirm": "acme"})

    assert refused.status_code == 400
    assert "type the organization&#x27;s slug &#x27;acme&#x27; to confirm deletion" in text(refused)
    assert deleted.status_code == 302 and deleted["Location"] == "/"
    assert not Organization.objects.filter(slug="acme").exists()


# --- Provider secrets ------------------------------------------------------------------

PLAINTEXT = "sk-live-abcdefghijklmnop-WXYZ"


def test_saved_provider_secret_is_never_shown_again(signed_in, tenant):
    client = signed_in(tenant.admin)

    response = client.post(
        f"{ORG}/secrets/", {"provider": "mistral", "api_key": PLAINTEXT, "base_url": ""}, follow=True
    )

    page = text(response)
    assert PLAINTEXT not in page
    assert "••••WXYZ" in page
    assert "admin@acme.example.com" in page
    secret = ProviderSecret.dangerously_unscoped_objects.get(organization=tenant.organization)
    assert PLAINTEXT not in secret.api_key_ciphertext


def test_refused_provider_secret_is_not_echoed_back(signed_in, tenant):
    response = signed_in(tenant.admin).post(
        f"{ORG}/secrets/", {"provider": "mistral", "api_key": PLAINTEXT, "base_url": "ftp://files.example.com/"}
    )

    assert response.status_code == 400
    assert PLAINTEXT not in text(response)
    assert not ProviderSecret.dangerously_unscoped_objects.exists()


def test_admin_deletes_a_provider_secret(signed_in, tenant, objects):
    signed_in(tenant.admin).post(f"{ORG}/secrets/mistral/delete/")

    assert not ProviderSecret.dangerously_unscoped_objects.filter(organization=tenant.organization).exists()


# --- Audit log ----------------------------------------------------------------------------


def test_audit_log_lists_events_newest_first(signed_in, tenant, objects):
    page = text(signed_in(tenant.admin).get(f"{ORG}/audit/"))

    actions = re.findall(r"<td><code>([a-z_.]+)</code></td>", page)
    assert actions[:3] == ["provider_secret.create", "invitation.create", "api_key.create"]
    assert "owner@acme.example.com" in page


def test_audit_log_filters_by_action_prefix(signed_in, tenant, objects):
    page = text(signed_in(tenant.admin).get(f"{ORG}/audit/", {"action": "api_key."}))

    actions = re.findall(r"<td><code>([a-z_.]+)</code></td>", page)
    assert actions == ["api_key.create"]


def test_audit_log_is_paginated(signed_in, tenant):
    with organization_scope(tenant.organization):
        for number in range(55):
            audit_record(organization=tenant.organization, actor=None, action=f"test.event{number:02}")
    client = signed_in(tenant.admin)

    first = re.findall(r"<td><code>([a-z_.0-9]+)</code></td>", text(client.get(f"{ORG}/audit/")))
    second = re.findall(r"<td><code>([a-z_.0-9]+)</code></td>", text(client.get(f"{ORG}/audit/", {"page": 2})))

    assert len(first) == 50 and len(second) == 5
    assert first[0] == "test.event54" and second[-1] == "test.event00"


def test_audit_log_never_shows_another_organizations_events(signed_in, tenant, other_tenant):
    with organization_scope(other_tenant.organization):
        audit_record(organization=other_tenant.organization, actor=None, action="globex.secret_plan")

    page = text(signed_in(tenant.owner).get(f"{ORG}/audit/"))

    assert "globex.secret_plan" not in page


# --- Layout -----------------------------------------------------------------------------


def test_navigation_shows_only_links_the_role_may_use(signed_in, tenant):
    owner_page = text(signed_in(tenant.owner).get(f"{PROJECT}/"))
    viewer_page = text(signed_in(tenant.viewer).get(f"{PROJECT}/"))

    for link in (f"{ORG}/settings/", f"{ORG}/secrets/", f"{ORG}/audit/", f"{ORG}/billing/", f"{PROJECT}/api-keys/"):
        assert f'href="{link}"' in owner_page
        assert f'href="{link}"' not in viewer_page
    for link in (f"{ORG}/members/", f"{PROJECT}/runs/"):
        assert f'href="{link}"' in viewer_page


def test_organization_switcher_lists_only_the_users_organizations(signed_in, tenant, other_tenant):
    page = text(signed_in(tenant.owner).get(f"{ORG}/"))

    assert 'href="/o/acme/"' in page
    assert 'href="/o/globex/"' not in page


def test_sign_out_is_a_post_form(signed_in, tenant):
    page = text(signed_in(tenant.viewer).get(f"{ORG}/"))

    assert re.search(r'<form method="post" action="/accounts/logout/">', page)


# --- Sign-in pages (django-allauth) in the site's layout -----------------------------


@pytest.mark.parametrize("path", ["/accounts/login/", "/accounts/signup/", "/accounts/password/reset/"])
def test_account_pages_use_the_site_layout(client, db, path):
    response = client.get(path)

    assert response.status_code == 200
    assert "/static/agentops/app.css" in text(response)
    assert 'class="card auth-card"' in text(response)


def test_login_page_offers_a_button_per_configured_social_provider(client, db, settings):
    settings.SOCIALACCOUNT_PROVIDERS = {
        "github": {"APPS": [{"client_id": "github-id", "secret": "github-secret"}]},
    }

    page = text(client.get("/accounts/login/"))

    assert re.search(r'<a class="btn btn-block provider provider-github"[^>]*href="/accounts/github/login/', page)
    assert "Continue with GitHub" in page


def test_login_page_has_no_provider_buttons_when_none_is_configured(client, db, settings):
    settings.SOCIALACCOUNT_PROVIDERS = {}

    page = text(client.get("/accounts/login/"))

    assert 'class="provider-list"' not in page
