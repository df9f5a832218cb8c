"""Bugs found in the one write path (runs/ingest/) and pinned: values
PostgreSQL refuses, the run's status and error following its root step, parent runs,
and two batches linking each other's sub-agents. The rest of ingest's tests are in
test_services_ingest.py."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from agentops.scoping import organization_scope
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.ingest import write as ingest_module
from runs.models import Message, Run, Step, ToolCall

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_ingest_stores_values_postgresql_refuses_instead_of_failing_the_batch(tenant):
    """ingest() is the one write path: the executor hands it a webhook tool's parsed
    JSON and the model's text as they come. NaN, Infinity, NUL characters and unpaired
    surrogates are refused by jsonb and text columns; they must not lose the batch."""
    project = tenant.project
    hostile = {"score": float("nan"), "big": float("inf"), "text": "a\x00b", "bad": "\ud800x", "k\x00": 1}
    with organization_scope(project.organization):
        ingest(
            project=project,
            runs=[RunEvent(trace_id="t", fields={"name": "run\x00", "output": hostile, "error": "e\x00"})],
            steps=[
                StepEvent(
                    trace_id="t",
                    span_id="r",
                    name="root\x00",
                    error="boom\x00",
                    input=hostile,
                    attributes={"x": float("-inf")},
                )
            ],
            messages=[MessageEvent(trace_id="t", message_id="m", position=0, role="tool", content="\x00out\ud800")],
            tool_calls=[ToolCallEvent(trace_id="t", call_id="c", tool_name="web\x00hook", result=hostile)],
            snapshots=[MemoryEvent(trace_id="t", snapshot_id="s", sequence=0, state=hostile)],
            announce=False,
        )
        run = Run.objects.get(project=project)
        step = Step.objects.get(project=project)
        message = Message.objects.get(project=project)
        tool_call = ToolCall.objects.get(project=project)
    assert run.name == "run" and run.error == "e"
    assert step.name == "root" and step.error == "boom"
    assert step.input["score"] == "NaN" and step.input["big"] == "Infinity" and step.input["text"] == "ab"
    assert step.attributes == {"x": "-Infinity"}
    assert message.content == "out?"  # as the OTLP mapping cleans an unpaired surrogate
    assert tool_call.tool_name == "webhook" and tool_call.result["k"] == 1


def test_run_error_follows_the_root_step_when_it_is_resent_successfully(tenant):
    project = tenant.project
    failed = StepEvent(trace_id="t", span_id="r", started_at=_at(0), ended_at=_at(1), status="error", error="timeout")
    retried = StepEvent(trace_id="t", span_id="r", started_at=_at(0), ended_at=_at(2), status="ok")
    with organization_scope(project.organization):
        ingest(project=project, steps=[failed], announce=False)
        assert Run.objects.get(project=project).error == "timeout"
        ingest(project=project, steps=[retried], announce=False)
        run = Run.objects.get(project=project)
    assert (run.status, run.error) == ("succeeded", "")


def test_an_error_the_client_stated_is_kept(tenant):
    project = tenant.project
    with organization_scope(project.organization):
        ingest(project=project, runs=[RunEvent(trace_id="t", fields={"error": "quota"})], announce=False)
        ingest(
            project=project,
            steps=[StepEvent(trace_id="t", span_id="r", started_at=_at(0), ended_at=_at(1), status="ok")],
            announce=False,
        )
        run = Run.objects.get(project=project)
    assert run.error == "quota"


@pytest.mark.parametrize(("step_status", "run_status"), [("error", "failed"), ("ok", "succeeded")])
def test_a_root_step_with_a_final_status_but_no_end_time_ends_the_run(tenant, step_status, run_status):
    """A script sends {"type": "step", "status": "error", "error": ...} without times: the
    step is over (a status is only known at the end), yet the run stayed "running"."""
    project = tenant.project
    root = StepEvent(trace_id="t", span_id="r", status=step_status, error="boom" if step_status == "error" else "")
    with organization_scope(project.organization):
        ingest(project=project, steps=[root], announce=False)
        run = Run.objects.get(project=project)
    assert (run.status, run.error) == (run_status, "boom" if step_status == "error" else "")


def test_run_latency_is_never_negative(tenant):
    # A client clock stepping back gives a span that ends before it starts.
    project = tenant.project
    with organization_scope(project.organization):
        ingest(
            project=project,
            steps=[StepEvent(trace_id="t", span_id="r", started_at=_at(10), ended_at=_at(4), status="ok")],
            announce=False,
        )
        run = Run.objects.get(project=project)
    assert run.latency_ms == 0


def test_a_run_resent_with_another_parent_is_linked_to_it(tenant):
    project = tenant.project
    with organization_scope(project.organization):
        parents = [RunEvent(trace_id="p1"), RunEvent(trace_id="p2")]
        ingest(
            project=project, runs=[*parents, RunEvent(trace_id="c", fields={"parent_trace_id": "p1"})], announce=False
        )
        ingest(project=project, runs=[RunEvent(trace_id="c", fields={"parent_trace_id": "p2"})], announce=False)
        runs = {run.trace_id: run for run in Run.objects.filter(project=project)}
        assert runs["c"].parent_run_id == runs["p2"].pk
        ingest(project=project, runs=[RunEvent(trace_id="c", fields={"parent_trace_id": ""})], announce=False)
        assert Run.objects.get(project=project, trace_id="c").parent_run_id is None


def test_a_run_naming_itself_as_parent_is_not_its_own_child(tenant):
    project = tenant.project
    root = StepEvent(trace_id="t", span_id="r", run_hints={"parent_trace_id": "t"})
    with organization_scope(project.organization):
        ingest(project=project, steps=[root], announce=False)
        assert Run.objects.get(project=project).parent_run_id is None


def test_two_batches_linking_each_others_sub_agents_do_not_deadlock(transactional_db, tenant, monkeypatch):
    """Sub-agent runs C (parent a) and D (parent b) wait for their parents. Batch 1 brings
    parent A and touches D, batch 2 brings parent B and touches C: each locked its own
    runs, then linking the other's child waited for the other batch (a deadlock, and a
    503 for one of them)."""
    project = tenant.project
    with organization_scope(project.organization):
        ingest(
            project=project,
            runs=[
                RunEvent(trace_id="c", fields={"parent_trace_id": "a"}),
                RunEvent(trace_id="d", fields={"parent_trace_id": "b"}),
            ],
            announce=False,
        )

    barrier = threading.Barrier(2, timeout=3)
    original = ingest_module.link_parent_runs

    def link_together(*args, **kwargs):
        # Both batches hold their runs' locks here before either links.
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass  # the other batch waits for a lock we hold: go on
        return original(*args, **kwargs)

    monkeypatch.setattr(ingest_module, "link_parent_runs", link_together)
    errors: list[Exception] = []

    def send(trace_ids):
        try:
            with organization_scope(project.organization):
                steps = [StepEvent(trace_id=t, span_id="s", started_at=_at(0)) for t in trace_ids]
                ingest(project=project, steps=steps, announce=False)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(ids,)) for ids in (["a", "d"], ["b", "c"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    with organization_scope(project.organization):
        runs = {run.trace_id: run for run in Run.objects.filter(project=project)}
    assert runs["c"].parent_run_id == runs["a"].pk
    assert runs["d"].parent_run_id == runs["b"].pk
