"""Items (steps, messages, tool calls, memory snapshots) go with their run: deleting a
project or an organization deletes their runs, and the runs their items, through the
items' run link (migration runs.0025: the items' organization and project links are not
indexed and Django does nothing with them on a deletion). Nothing of another project or
organization is touched."""

from datetime import UTC, datetime

from django.db import connection

from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.organizations import organization_delete, project_delete
from runs.events import MemoryEvent, MessageEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.models import MemorySnapshot, Message, Run, Step, ToolCall
from tests.agentops.factories import ProjectFactory

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ITEM_MODELS = (Step, Message, ToolCall, MemorySnapshot)


def _send(project, trace_id: str, spans: int = 30) -> None:
    """A run of ``spans`` steps with a message, a tool call and a snapshot each (enough
    rows to go by COPY)."""
    with organization_scope(project.organization):
        ingest(
            project=project,
            announce=False,
            steps=[
                StepEvent(trace_id=trace_id, span_id=f"s{i}", kind="tool", name="search", started_at=T0)
                for i in range(spans)
            ],
            messages=[
                MessageEvent(
                    trace_id=trace_id, message_id=f"m{i}", position=i, role="user", content="hi", span_id=f"s{i}"
                )
                for i in range(spans)
            ],
            tool_calls=[
                ToolCallEvent(trace_id=trace_id, call_id=f"c{i}", tool_name="search", span_id=f"s{i}")
                for i in range(spans)
            ],
            snapshots=[
                MemoryEvent(trace_id=trace_id, snapshot_id=f"n{i}", sequence=i, state={"i": i}, span_id=f"s{i}")
                for i in range(spans)
            ],
        )


def _counts(**where) -> tuple[int, ...]:
    with dangerously_unscoped("counting every tenant's rows"):
        return tuple(model.objects.filter(**where).count() for model in (Run, *ITEM_MODELS))


def test_deleting_a_project_deletes_its_runs_items_and_nothing_of_another_project(tenant):
    kept = ProjectFactory(organization=tenant.organization, name="kept", slug="kept")
    _send(tenant.project, "gone")
    _send(kept, "kept")
    project_id = tenant.project.pk
    assert _counts(project_id=project_id) == (1, 30, 30, 30, 30)

    with organization_scope(tenant.organization):
        project_delete(project=tenant.project, actor=tenant.owner)

    assert _counts(project_id=project_id) == (0, 0, 0, 0, 0)
    assert _counts(project_id=kept.pk) == (1, 30, 30, 30, 30)


def test_deleting_an_organization_deletes_its_runs_items_and_nothing_of_another(tenant, other_tenant):
    _send(tenant.project, "gone")
    _send(other_tenant.project, "kept")
    organization_id = tenant.organization.pk

    with organization_scope(tenant.organization):
        organization_delete(organization=tenant.organization, actor=tenant.owner, confirm_slug="acme")

    assert _counts(organization_id=organization_id) == (0, 0, 0, 0, 0)
    assert _counts(organization_id=other_tenant.organization.pk) == (1, 30, 30, 30, 30)


def test_the_item_tables_index_no_organization_or_project_link_alone(db):
    """Every item row written pays for each index: none is kept for links that nothing
    reads items by (the steps' project leads step_project_started, for the dashboard)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, indexdef FROM pg_indexes WHERE tablename = ANY(%s)",
            [["runs_step", "runs_message", "runs_toolcall", "runs_memorysnapshot"]],
        )
        indexes = cursor.fetchall()
    leading = {(table, definition.split("(", 1)[1].split(")")[0]) for table, definition in indexes}
    for table in ("runs_step", "runs_message", "runs_toolcall", "runs_memorysnapshot"):
        assert (table, "organization_id") not in leading
        assert (table, "project_id") not in leading
    assert ("runs_memorysnapshot", "run_id") not in leading  # memory_run_sequence leads with it
    assert ("runs_step", "project_id, started_at DESC") in leading
