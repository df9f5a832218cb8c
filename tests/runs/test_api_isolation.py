"""Every read endpoint of the runs API passes the shared tenant-isolation checks, for a
signed-in member and for an API key of the project: another organization's run,
step list, transcript, tool calls, memory, session, replays, approvals or comparison is
a 404, and lists exclude it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from agentops.scoping import organization_scope
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.models import Run
from tests.agentops.factories import ProjectFactory
from tests.isolation import ListIsolation, ReadIsolation

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def make_run(tenant) -> Run:
    """A run with one of everything; every id names the organization, so a leak shows."""
    slug = tenant.organization.slug
    trace = f"trace-{slug}"
    with organization_scope(tenant.organization):
        ingest(
            project=tenant.project,
            runs=[RunEvent(trace, {"name": f"run of {slug}", "session_id": f"session-{slug}", "started_at": T0})],
            steps=[StepEvent(trace_id=trace, span_id=f"span-{slug}", kind="agent", started_at=T0)],
            messages=[MessageEvent(trace, f"message-{slug}", 1, "user", "hello")],
            tool_calls=[ToolCallEvent(trace, f"call-{slug}", "search")],
            snapshots=[MemoryEvent(trace, f"snapshot-{slug}", 1, {"owner": slug})],
            announce=False,
        )
        return Run.objects.get(project=tenant.project, trace_id=trace)


def project_url(tenant) -> str:
    return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}"


def own_run(tenant) -> Run:
    with organization_scope(tenant.organization):
        return Run.objects.get(project=tenant.project, trace_id=f"trace-{tenant.organization.slug}")


def slug_of(run: Run) -> str:
    return run.trace_id.removeprefix("trace-")


class _RunResource:
    def make_object(self, tenant):
        return make_run(tenant)


class TestRunIsolation(_RunResource, ReadIsolation, ListIsolation):
    def detail_url(self, url_tenant, run):
        return f"{project_url(url_tenant)}/runs/{run.pk}/"

    def list_url(self, tenant):
        return f"{project_url(tenant)}/runs/"


class TestRunIsolationWithApiKey(TestRunIsolation):
    as_key = True


class _RunChildResource(_RunResource, ReadIsolation, ListIsolation):
    """A run's sub-list (steps, messages...): the foreign run's is a 404, and the
    caller's own run's list holds only its own rows."""

    child_path = ""
    id_field = ""
    id_prefix = ""

    def detail_url(self, url_tenant, run):
        return f"{project_url(url_tenant)}/runs/{run.pk}/{self.child_path}/"

    def list_url(self, tenant):
        return f"{project_url(tenant)}/runs/{own_run(tenant).pk}/{self.child_path}/"

    def list_ids(self, response):
        return {item[self.id_field] for item in response.json()}

    def list_id(self, run):
        return f"{self.id_prefix}-{slug_of(run)}"


class TestRunStepsIsolation(_RunChildResource):
    child_path, id_field, id_prefix = "steps", "span_id", "span"


class TestRunStepsIsolationWithApiKey(TestRunStepsIsolation):
    as_key = True


class TestRunMessagesIsolation(_RunChildResource):
    child_path, id_field, id_prefix = "messages", "message_id", "message"


class TestRunMessagesIsolationWithApiKey(TestRunMessagesIsolation):
    as_key = True


class TestRunToolCallsIsolation(_RunChildResource):
    child_path, id_field, id_prefix = "tool-calls", "call_id", "call"


class TestRunToolCallsIsolationWithApiKey(TestRunToolCallsIsolation):
    as_key = True


class TestRunMemoryIsolation(_RunChildResource):
    child_path, id_field, id_prefix = "memory", "snapshot_id", "snapshot"


class TestRunMemoryIsolationWithApiKey(TestRunMemoryIsolation):
    as_key = True


class TestSessionIsolation(_RunResource, ReadIsolation, ListIsolation):
    def detail_url(self, url_tenant, run):
        return f"{project_url(url_tenant)}/sessions/{run.session_id}/"

    def list_url(self, tenant):
        return f"{project_url(tenant)}/sessions/"

    def list_ids(self, response):
        return {item["session_id"] for item in response.json()["results"]}

    def list_id(self, run):
        return run.session_id

    def test_same_session_id_in_two_organizations_shows_only_ones_own_runs(self, caller, tenant, other_tenant):
        for owner in (tenant, other_tenant):
            with organization_scope(owner.organization):
                ingest(
                    project=owner.project,
                    runs=[RunEvent(f"shared-{owner.organization.slug}", {"session_id": "shared", "started_at": T0})],
                    announce=False,
                )
        body = caller.get(f"{project_url(tenant)}/sessions/shared/").json()
        assert body["run_count"] == 1
        assert [run["trace_id"] for run in body["runs"]] == [f"shared-{tenant.organization.slug}"]


class TestSessionIsolationWithApiKey(TestSessionIsolation):
    as_key = True


class TestRunExportIsolation(_RunResource, ListIsolation):
    def list_url(self, tenant):
        return f"{project_url(tenant)}/runs/export/"

    def list_ids(self, response):
        return {json.loads(line)["id"] for line in b"".join(response.streaming_content).decode().splitlines()}


class TestRunExportIsolationWithApiKey(TestRunExportIsolation):
    as_key = True


class TestRunReplaysIsolation(_RunResource, ReadIsolation):
    """A foreign run's replays are not found (so neither is the run)."""

    def detail_url(self, url_tenant, run):
        return f"{project_url(url_tenant)}/runs/{run.pk}/replays/"


class TestRunReplaysIsolationWithApiKey(TestRunReplaysIsolation):
    as_key = True


class TestRunApprovalsIsolation(_RunResource, ReadIsolation):
    def detail_url(self, url_tenant, run):
        return f"{project_url(url_tenant)}/runs/{run.pk}/approvals/"


class TestRunApprovalsIsolationWithApiKey(TestRunApprovalsIsolation):
    as_key = True


class TestRunCompareIsolation(_RunResource, ReadIsolation):
    """Comparing with a foreign run is not found, whichever side it is on."""

    def detail_url(self, url_tenant, run):
        return f"{project_url(url_tenant)}/compare/?a={run.pk}&b={run.pk}"

    def test_a_foreign_run_on_either_side_is_not_found(self, caller, tenant, other_tenant):
        mine, foreign = make_run(tenant), make_run(other_tenant)
        for a, b in ((mine, foreign), (foreign, mine)):
            response = caller.get(f"{project_url(tenant)}/compare/?a={a.pk}&b={b.pk}")
            assert response.status_code == 404, response.content


class TestRunCompareIsolationWithApiKey(TestRunCompareIsolation):
    as_key = True


def test_api_key_of_another_project_in_the_same_organization_reads_nothing_here(tenant, key_client):
    run = make_run(tenant)
    sibling_key = key_client(ProjectFactory(organization=tenant.organization, slug="sibling"), ["read"])
    base = project_url(tenant)
    for url in (
        f"{base}/runs/",
        f"{base}/runs/{run.pk}/",
        f"{base}/runs/{run.pk}/steps/",
        f"{base}/runs/export/",
        f"{base}/sessions/",
        f"{base}/sessions/{run.session_id}/",
    ):
        response = sibling_key.get(url)
        assert response.status_code == 404, url
        assert response.json()["error"]["code"] == "not_found"


def test_run_and_session_of_a_sibling_project_are_not_found_in_own_project_url(tenant, client_for):
    sibling = ProjectFactory(organization=tenant.organization, slug="sibling")
    with organization_scope(tenant.organization):
        ingest(project=sibling, runs=[RunEvent("sibling-run", {"session_id": "sib"})], announce=False)
        foreign = Run.objects.get(project=sibling)
    client = client_for(tenant.owner)
    base = project_url(tenant)
    for suffix in ("", "steps/", "messages/", "tool-calls/", "memory/"):
        response = client.get(f"{base}/runs/{foreign.pk}/{suffix}")
        assert response.status_code == 404, suffix
        assert response.json()["error"]["code"] == "not_found"
    assert client.get(f"{base}/sessions/sib/").status_code == 404
    assert client.get(f"{base}/runs/").json()["results"] == []
