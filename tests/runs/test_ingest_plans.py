"""Ingest's statements stay on their indexes in a new installation too: before
autovacuum first analyses a table (its first minute), PostgreSQL plans without
statistics, and a statement that can take a wrong index then reads all of a project's
runs on every batch, a cost that grows with the table."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentops.models import Project
from agentops.scoping import organization_scope
from runs.events import RunEvent, StepEvent
from runs.ingest import ingest
from runs.models import Run

ROOT_RUNS = 2_000


def _without_statistics(table: str) -> None:
    """The table as a new installation has it: never analysed. Undone with the test's
    transaction. Needs a superuser (the embedded PostgreSQL's user is one)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cursor.fetchone()[0]:
            pytest.skip("clearing a table's statistics needs a PostgreSQL superuser")
        cursor.execute("DELETE FROM pg_statistic WHERE starelid = %s::regclass", [table])
        cursor.execute("UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = %s::regclass", [table])


def _scans(plan: dict):
    """Every scan node of an EXPLAIN (FORMAT JSON) plan."""
    if "Scan" in plan["Node Type"]:
        yield plan
    for child in plan.get("Plans", []):
        yield from _scans(child)


def _root_runs(project, prefix: str = "root") -> None:
    """ROOT_RUNS runs of ``project``, trace ids ``<prefix>-0`` and on."""
    Run.objects.bulk_create(
        (Run(organization=project.organization, project=project, trace_id=f"{prefix}-{i}") for i in range(ROOT_RUNS)),
        batch_size=500,
    )


def _statistics_older_than(project) -> None:
    """Statistics taken before ``project`` had runs: another project's runs, analysed."""
    other = Project.objects.create(organization=project.organization, name="Other", slug="other")
    _root_runs(other, "other")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_run")


def _plan(queries, marker: str, *, analyze: bool = True) -> dict:
    """The EXPLAIN (FORMAT JSON) plan of the captured statement holding ``marker``."""
    statement = next(q["sql"] for q in queries.captured_queries if marker in q["sql"])
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ({'ANALYZE, ' if analyze else ''}FORMAT JSON) {statement}")
        plan = cursor.fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)
    return plan[0]["Plan"]


def test_locking_a_batchs_runs_finds_the_runs_waiting_for_a_parent_in_their_index_without_statistics(tenant):
    project = tenant.project
    with organization_scope(project.organization):
        _root_runs(project)
        ingest(project=project, runs=[RunEvent(trace_id="child", fields={"parent_trace_id": "parent"})], announce=False)
        _without_statistics("runs_run")
        with CaptureQueriesContext(connection) as queries:
            ingest(
                project=project,
                steps=[StepEvent(trace_id=trace_id, span_id="root") for trace_id in ("parent", "root-7", "new")],
                announce=False,
            )
        # The sub-agent run waiting for "parent" was found and linked.
        assert Run.objects.get(trace_id="child").parent_run == Run.objects.get(trace_id="parent")
    waiting_lookup = [
        scan
        for scan in _scans(_plan(queries, "FOR UPDATE"))
        if "parent_trace_id" in scan.get("Index Cond", "") + scan.get("Filter", "")
    ]
    # The runs waiting for a parent are looked up in their own index, which holds them
    # only: not by reading the project's 2,000 root runs.
    assert [scan.get("Index Name") for scan in waiting_lookup] == ["run_waiting_for_parent"]
    assert waiting_lookup[0]["Actual Rows"] + waiting_lookup[0].get("Rows Removed by Filter", 0) <= 1


@pytest.mark.parametrize("statistics", ["none yet", "older than the project"])
def test_locking_a_batchs_runs_looks_each_trace_id_up_in_the_unique_index(tenant, statistics):
    """Before, the planner took a run_project_* index for the lookup of each trace id
    (they lead with the project too) whenever it believed the project had at most one
    run, and read all of the project's runs for each of a batch's 64 trace ids: with no
    statistics (a new installation), and with statistics taken before the project had
    runs (a new project in a table of others: until autovacuum analyses the table again,
    after a tenth of it has changed)."""
    project = tenant.project
    with organization_scope(project.organization):
        if statistics == "none yet":
            _without_statistics("runs_run")
        else:
            _statistics_older_than(project)
        _root_runs(project)
        trace_ids = ["root-7", *(f"new-{i}" for i in range(63))]
        with CaptureQueriesContext(connection) as queries:
            ingest(project=project, steps=[StepEvent(trace_id=t, span_id="s") for t in trace_ids], announce=False)
        # The existing run was found (its step joined it), the others created.
        assert Run.objects.get(project=project, trace_id="root-7").steps.count() == 1
        assert Run.objects.filter(project=project, trace_id__startswith="new-").count() == 63
    trace_lookups = [
        scan
        for scan in _scans(_plan(queries, "FOR UPDATE"))
        if "trace_id" in (conditions := scan.get("Index Cond", "") + scan.get("Filter", ""))
        and "parent_trace_id" not in conditions
    ]
    assert trace_lookups, "no lookup by trace id in the plan"
    for scan in trace_lookups:
        assert scan.get("Index Name") == "run_unique_trace", scan["Node Type"]
        # Each trace id reads its own run only, none of the project's 2,000 others. (Not
        # "Actual Rows": a bitmap scan counts the dead entries earlier tests left too.)
        assert scan.get("Rows Removed by Filter", 0) == 0


def test_linking_sub_agent_runs_looks_their_parents_up_in_the_unique_index_for_a_new_project(tenant):
    """Sub-agent runs find their parent run by its trace id: as for the lock, a project
    newer than the table's statistics made the planner read all of the project's runs
    for each of them."""
    project = tenant.project
    with organization_scope(project.organization):
        _statistics_older_than(project)
        _root_runs(project)
        children = [RunEvent(trace_id=f"child-{i}", fields={"parent_trace_id": f"root-{i}"}) for i in range(64)]
        with CaptureQueriesContext(connection) as queries:
            ingest(project=project, runs=children, announce=False)
        linked = dict(
            Run.objects.filter(project=project, trace_id__startswith="child-").values_list(
                "trace_id", "parent_run__trace_id"
            )
        )
        assert linked == {f"child-{i}": f"root-{i}" for i in range(64)}
    parent_lookups = [
        scan
        for scan in _scans(_plan(queries, "SET parent_run_id", analyze=False))
        if scan.get("Relation Name") == "runs_run" and scan.get("Alias", "").startswith("parent")
    ]
    assert parent_lookups, "no lookup of the parent runs in the plan"
    assert [scan.get("Index Name") for scan in parent_lookups] == ["run_unique_trace"] * len(parent_lookups)


def test_a_runs_sub_agents_and_replays_are_read_from_indexes_of_the_runs_that_have_one(tenant):
    """Links most runs leave empty are indexed for the runs that have one only (no entry
    written for the others at each insert and totals' update), and still serve the
    lookups of the runs that have one."""
    project = tenant.project
    with organization_scope(project.organization):
        _root_runs(project)
        parent = Run.objects.get(trace_id="root-0")
        children = [
            Run.objects.create(organization=project.organization, project=project, trace_id=f"child-{i}", **link)
            for i, link in enumerate([{"parent_run": parent}, {"parent_run": parent}, {"replay_of": parent}])
        ]
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE runs_run")
            cursor.execute(
                "SELECT relname, reltuples FROM pg_class WHERE relname = ANY(%s)",
                [["run_parent_run", "run_replay_of", "run_api_key"]],
            )
            entries = dict(cursor.fetchall())
        assert entries == {"run_parent_run": 2, "run_replay_of": 1, "run_api_key": 0}
        for related, index in (("children", "run_parent_run"), ("replays", "run_replay_of")):
            with CaptureQueriesContext(connection) as queries:
                found = list(getattr(parent, related).all())
            assert {run.pk for run in found} <= {run.pk for run in children} and found
            scans = list(_scans(_plan(queries, "runs_run")))
            assert [scan.get("Index Name") for scan in scans] == [index], scans
