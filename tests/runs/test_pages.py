"""The runs pages: list, filters, saved views, a run's detail and its fragments, sessions,
the dashboard; tenant isolation of every one of them; the live fragments ingest sends.

Data is created the way agents create it: through ``runs.ingest.ingest``."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from urllib.parse import urlencode

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import Client
from django.utils import timezone

from agentops.live import group_name
from agentops.scoping import organization_scope
from runs import selectors
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.live import render_runs_ingested
from runs.models import IngestSettings, Run, SavedView, Step
from runs.views import display
from tests.agentops.factories import ProjectFactory
from tests.runs.factories import XSS, agent_run, hostile_run

BASE = "/o/acme/p/agent/runs"
HTMX = {"HTTP_HX_REQUEST": "true"}


def text(response) -> str:
    return response.content.decode()


# --- Test data, sent through the one ingest path ---------------------------------------------


@dataclass
class Batch:
    runs: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    messages: list = field(default_factory=list)
    tool_calls: list = field(default_factory=list)
    snapshots: list = field(default_factory=list)

    def __iadd__(self, other: Batch) -> Batch:
        for name in ("runs", "steps", "messages", "tool_calls", "snapshots"):
            getattr(self, name).extend(getattr(other, name))
        return self


def support_run(
    trace_id: str,
    *,
    start: datetime,
    question: str = "Where is my order #1042?",
    model: str = "mistral-large-2512",
    fail: bool = False,
    session_id: str = "",
    tags: tuple = ("prod",),
    environment: str = "production",
    agent: str = "support-bot",
    parent_trace_id: str = "",
    seconds: float = 4.0,
) -> Batch:
    """A realistic support agent run: an agent span, an LLM call that asks for a tool,
    the tool, a second LLM call that answers; the transcript, the tool call, and the
    agent's memory before and after."""

    def at(offset: float) -> datetime:
        return start + timedelta(seconds=offset)

    answer = "Your order shipped yesterday; it arrives on Friday." if not fail else None
    fields = {
        "name": f"support: {question[:40]}",
        "agent_name": agent,
        "agent_version": "1.4.0",
        "session_id": session_id,
        "tags": list(tags),
        "environment": environment,
        "release": "2026.11.2",
        "end_user_id": "customer-77",
    }
    if parent_trace_id:
        fields["parent_trace_id"] = parent_trace_id
    batch = Batch(runs=[RunEvent(trace_id=trace_id, fields=fields)])
    batch.steps = [
        StepEvent(
            trace_id=trace_id,
            span_id="root",
            kind="agent",
            name="support agent",
            started_at=at(0),
            ended_at=at(seconds),
            status="error" if fail else "ok",
            error="ToolError: the orders API timed out" if fail else "",
            input={"question": question},
            output={"answer": answer},
        ),
        StepEvent(
            trace_id=trace_id,
            span_id="llm-1",
            parent_span_id="root",
            kind="llm",
            name="chat mistral",
            model=model,
            provider="mistral",
            started_at=at(0.1),
            ended_at=at(1.2),
            status="ok",
            input_tokens=1200,
            output_tokens=40,
            input={"messages": [{"role": "user", "content": question}]},
            output={"tool_calls": [{"name": "lookup_order", "arguments": {"order": 1042}}]},
            attributes={"gen_ai.request.temperature": 0.2, "gen_ai.system": "mistral_ai"},
        ),
        StepEvent(
            trace_id=trace_id,
            span_id="tool-1",
            parent_span_id="root",
            kind="tool",
            name="lookup_order",
            started_at=at(1.3),
            ended_at=at(2.1),
            status="error" if fail else "ok",
            error="timeout after 800 ms" if fail else "",
            input={"order": 1042},
            output={"status": "shipped", "eta": "Friday"},
        ),
        StepEvent(
            trace_id=trace_id,
            span_id="llm-2",
            parent_span_id="root",
            kind="llm",
            name="chat mistral",
            model=model,
            provider="mistral",
            started_at=at(2.2),
            ended_at=at(seconds - 0.1),
            status="ok",
            input_tokens=1400,
            output_tokens=60,
        ),
    ]
    batch.messages = [
        MessageEvent(trace_id, "m0", 0, "system", "You are a courteous support agent.", span_id="llm-1"),
        MessageEvent(trace_id, "m1", 1, "user", question, span_id="llm-1"),
        MessageEvent(
            trace_id,
            "m2",
            2,
            "assistant",
            None,
            span_id="llm-1",
            tool_calls=[
                {
                    "id": "call-7",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order": 1042, "include": ["eta"]}'},
                }
            ],
            finish_reason="tool_calls",
        ),
        MessageEvent(trace_id, "m3", 3, "tool", '{"status": "shipped", "eta": "Friday"}', tool_call_id="call-7"),
        MessageEvent(trace_id, "m4", 4, "assistant", answer or "", span_id="llm-2", tokens=60, finish_reason="stop"),
    ]
    batch.tool_calls = [
        ToolCallEvent(
            trace_id,
            "call-7",
            "lookup_order",
            span_id="tool-1",
            arguments={"order": 1042, "include": ["eta"]},
            result=None if fail else {"status": "shipped", "eta": "Friday"},
            error="timeout after 800 ms" if fail else "",
            latency_ms=800.0,
            started_at=at(1.3),
        )
    ]
    batch.snapshots = [
        MemoryEvent(trace_id, "s0", 0, {"customer": "customer-77", "orders": [], "mood": "neutral"}, span_id="llm-1"),
        MemoryEvent(
            trace_id,
            "s1",
            1,
            {"customer": "customer-77", "orders": [1042], "last_tool": "lookup_order"},
            span_id="tool-1",
        ),
    ]
    return batch


def multi_agent_runs(project) -> int:
    """A planner run whose two sub-agent runs report it as their parent; the planner's id."""
    start = T0 + timedelta(minutes=30)
    store(project, support_run("planner", start=start, question="Plan a refund", agent="planner", seconds=8))
    store(
        project,
        support_run("sub-refund", start=start + timedelta(seconds=1), agent="refunds", parent_trace_id="planner"),
    )
    store(
        project,
        support_run("sub-email", start=start + timedelta(seconds=5), agent="mailer", parent_trace_id="planner"),
    )
    return run_of(project, "planner").pk


def store(project, batch: Batch, *, announce: bool = False):
    with organization_scope(project.organization):
        return ingest(
            project=project,
            runs=batch.runs,
            steps=batch.steps,
            messages=batch.messages,
            tool_calls=batch.tool_calls,
            snapshots=batch.snapshots,
            announce=announce,
        )


def run_of(project, trace_id: str) -> Run:
    with organization_scope(project.organization):
        return Run.objects.get(project=project, trace_id=trace_id)


def first_step(project, run: Run, span_id: str) -> Step:
    with organization_scope(project.organization):
        return Step.objects.get(run=run, span_id=span_id)


T0 = timezone.now().replace(microsecond=0) - timedelta(hours=3)


@pytest.fixture
def runs(tenant):
    """Three support runs in acme's project: two in one session, one failed."""
    project = tenant.project
    store(project, support_run("trace-a", start=T0, session_id="conv-1", tags=("prod", "vip")))
    store(project, support_run("trace-b", start=T0 + timedelta(minutes=5), session_id="conv-1", question="Refund?"))
    store(
        project,
        support_run(
            "trace-c",
            start=T0 + timedelta(minutes=10),
            fail=True,
            model="my-finetune-7b",
            environment="staging",
            question="Cancel my subscription",
            seconds=9,
        ),
    )
    return {trace: run_of(project, trace) for trace in ("trace-a", "trace-b", "trace-c")}


def urls_of(run: Run, step: Step, message_id: int, base: str = BASE) -> list[tuple[str, dict]]:
    """Every runs page and fragment naming ``run`` and its rows, with the headers to send."""
    detail = f"{base}/{run.pk}"
    return [
        (f"{base}/", {}),
        (f"{base}/?status=failed&q=cancel", {}),
        (f"{base}/sessions/", {}),
        (f"{base}/sessions/conv-1/", {}),
        (f"{base}/dashboard/", {}),
        (f"{base}/dashboard/?range=7d", {}),
        (f"{detail}/", {}),
        (f"{detail}/?tab=transcript", {}),
        (f"{detail}/?tab=tools", {}),
        (f"{detail}/?tab=memory", {}),
        (f"{detail}/?tab=trace&step={step.pk}", {}),
        # A digit that is no decimal digit: str.isdigit() took it, int() did not (a 500).
        (f"{detail}/?tab=trace&step=²", {}),
        (f"{detail}/live/?tab=trace", HTMX),
        (f"{detail}/live/?tab=memory", HTMX),
        (f"{detail}/steps/{step.pk}/", HTMX),
        (f"{detail}/values/step/{step.pk}/input/", HTMX),
        (f"{detail}/values/step/{step.pk}/input/", {}),
        (f"{detail}/values/step/{step.pk}/attributes/?raw=1", {}),
        (f"{detail}/values/message/{message_id}/content/", HTMX),
        (f"{detail}/values/run/{run.pk}/input/", HTMX),
        (f"{detail}/trajectory/", {}),
        (f"{base}/trajectory/?session=conv-1", {}),
    ]


def a_message_id(project, run: Run) -> int:
    with organization_scope(project.organization):
        return selectors.message_list(run=run).first().pk


# --- Every page renders; nobody else's data is reachable --------------------------------------


def test_every_runs_page_and_fragment_renders_for_a_viewer(signed_in, tenant, runs):
    run = runs["trace-a"]
    client = signed_in(tenant.viewer)

    for url, headers in urls_of(run, first_step(tenant.project, run, "llm-1"), a_message_id(tenant.project, run)):
        response = client.get(url, **headers)
        assert response.status_code == 200, f"{url} answered {response.status_code}"


def test_signed_out_visitor_is_sent_to_login_from_runs_pages(client, tenant, runs):
    for path in (f"{BASE}/", f"{BASE}/{runs['trace-a'].pk}/", f"{BASE}/dashboard/", f"{BASE}/sessions/"):
        response = client.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), path


def test_outsider_gets_404_on_every_runs_page_and_fragment(signed_in, tenant, runs, outsider):
    run = runs["trace-a"]
    client = signed_in(outsider)

    for url, headers in urls_of(run, first_step(tenant.project, run, "llm-1"), a_message_id(tenant.project, run)):
        response = client.get(url, **headers)
        assert response.status_code == 404, f"{url} answered {response.status_code}"
        assert "support" not in text(response).lower(), f"{url} leaks the run"
    assert client.post(f"{BASE}/views/", {"name": "x", "query": "status=failed"}).status_code == 404
    with organization_scope(tenant.organization):
        assert not SavedView.objects.exists()


def test_a_run_of_another_organization_is_404_under_ones_own_project(signed_in, tenant, other_tenant, runs):
    store(other_tenant.project, support_run("globex-run", start=T0, question="Globex secret plans"))
    foreign = run_of(other_tenant.project, "globex-run")
    foreign_step = first_step(other_tenant.project, foreign, "llm-1")
    client = signed_in(tenant.owner)

    for url, headers in urls_of(foreign, foreign_step, a_message_id(other_tenant.project, foreign)):
        if f"/{foreign.pk}/" not in url:
            continue  # pages that name no run are the viewer's own project
        response = client.get(url, **headers)
        assert response.status_code == 404, f"{url} answered {response.status_code}"
        assert "Globex secret" not in text(response)


def test_a_run_of_another_project_of_the_same_organization_is_404(signed_in, tenant, runs):
    sibling = ProjectFactory(organization=tenant.organization, name="Billing bot", slug="billing-bot")
    store(sibling, support_run("sibling-run", start=T0, question="Sibling project question"))
    foreign = run_of(sibling, "sibling-run")
    own_step = first_step(tenant.project, runs["trace-a"], "llm-1")
    foreign_step = first_step(sibling, foreign, "llm-1")
    client = signed_in(tenant.viewer)

    assert client.get(f"/o/acme/p/billing-bot/runs/{foreign.pk}/").status_code == 200
    for url in (
        f"{BASE}/{foreign.pk}/",
        f"{BASE}/{foreign.pk}/live/",
        f"{BASE}/{foreign.pk}/steps/{foreign_step.pk}/",
        f"{BASE}/{foreign.pk}/values/step/{foreign_step.pk}/input/",
        f"{BASE}/{foreign.pk}/values/run/{foreign.pk}/input/",
        # The project's own run with a step of the other project's run.
        f"{BASE}/{runs['trace-a'].pk}/steps/{foreign_step.pk}/",
        f"{BASE}/{runs['trace-a'].pk}/values/step/{foreign_step.pk}/input/",
        f"{BASE}/{runs['trace-a'].pk}/values/run/{foreign.pk}/input/",
    ):
        assert client.get(url, **HTMX).status_code == 404, url
    assert client.get(f"{BASE}/{runs['trace-a'].pk}/steps/{own_step.pk}/", **HTMX).status_code == 200
    assert "Sibling project question" not in text(client.get(f"{BASE}/?q=sibling"))


def test_the_value_fragment_serves_only_payload_fields(signed_in, tenant, runs):
    run = runs["trace-a"]
    step = first_step(tenant.project, run, "llm-1")
    client = signed_in(tenant.viewer)

    for field_name in ("organization_id", "project", "run_id", "price"):
        assert client.get(f"{BASE}/{run.pk}/values/step/{step.pk}/{field_name}/").status_code == 404
    assert client.get(f"{BASE}/{run.pk}/values/user/1/email/").status_code == 404


# --- The runs list: filters, sort, pages, saved views -------------------------------------------


def listed(response) -> list[str]:
    """The trace ids of the runs listed, in order."""
    return re.findall(r'<code title="Trace id">([^<]+)</code>', text(response))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, ["trace-c", "trace-b", "trace-a"]),
        ({"status": "failed"}, ["trace-c"]),
        ({"status": ["failed", "succeeded"]}, ["trace-c", "trace-b", "trace-a"]),
        ({"q": "refund"}, ["trace-b"]),
        ({"model": "my-finetune-7b"}, ["trace-c"]),
        ({"tag": "vip"}, ["trace-a"]),
        ({"session": "conv-1"}, ["trace-b", "trace-a"]),
        ({"environment": "staging"}, ["trace-c"]),
        ({"agent": "support-bot", "environment": "production"}, ["trace-b", "trace-a"]),
        ({"trace_id": "trace-b"}, ["trace-b"]),
        ({"min_latency_ms": "5000"}, ["trace-c"]),
        ({"max_latency_ms": "5000"}, ["trace-b", "trace-a"]),
        ({"min_cost": "0.001"}, ["trace-b", "trace-a"]),
        ({"max_cost": "0"}, ["trace-c"]),
        ({"range": "1h"}, []),
        ({"range": "24h"}, ["trace-c", "trace-b", "trace-a"]),
        (
            {"range": "custom", "started_after": (T0 + timedelta(minutes=4)).strftime("%Y-%m-%dT%H:%M")},
            ["trace-c", "trace-b"],
        ),
        ({"sort": "started_at"}, ["trace-a", "trace-b", "trace-c"]),
        ({"sort": "-latency"}, ["trace-c", "trace-b", "trace-a"]),
    ],
)
def test_filters_and_sort_change_the_list(signed_in, tenant, runs, query, expected):
    response = signed_in(tenant.viewer).get(f"{BASE}/", query)

    assert response.status_code == 200
    assert listed(response) == expected


def test_invalid_filter_input_is_shown_and_the_valid_filters_still_apply(signed_in, tenant, runs):
    response = signed_in(tenant.viewer).get(f"{BASE}/", {"status": "failed", "min_cost": "a lot"})

    assert listed(response) == ["trace-c"]
    assert "Enter a number." in text(response)


def test_the_unpriced_marker_and_exact_decimal_cost_show_in_the_list(signed_in, tenant, runs):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/"))
    row_c = page[page.index('id="run-' + str(runs["trace-c"].pk)) :].split("</tbody>")[0]
    row_a = page[page.index('id="run-' + str(runs["trace-a"].pk)) :].split("</tbody>")[0]

    # mistral-large-2512: $0.50 in and $1.50 out per million tokens, for 2,600 in and 100 out.
    assert runs["trace-a"].total_cost == Decimal("0.001450000")
    assert "$0.00145" in row_a and "unpriced" not in row_a
    assert "unpriced" in row_c and "$0.00" in row_c


def test_older_pages_follow_the_last_row_without_repeats_or_gaps(signed_in, tenant, monkeypatch):
    from runs.views import runs_list

    monkeypatch.setattr(runs_list, "PAGE_SIZE", 3)
    project = tenant.project
    batch = Batch()
    for index in range(8):
        # Two runs share each start time, so the id must break the ties.
        batch.steps.append(
            StepEvent(
                trace_id=f"page-{index}",
                span_id="root",
                kind="agent",
                name=f"run {index}",
                started_at=T0 + timedelta(minutes=index // 2),
                ended_at=T0 + timedelta(minutes=index // 2, seconds=index),
            )
        )
    batch.runs.append(RunEvent(trace_id="no-start", fields={"name": "queued run", "status": "queued"}))
    store(project, batch)
    client = signed_in(tenant.viewer)

    for sort in ("-started_at", "started_at", "-latency", "latency", "cost"):
        seen, url, pages = [], f"{BASE}/?sort={sort}", 0
        while url:
            response = client.get(url)
            seen += listed(response)
            pages += 1
            older = re.search(r'id="runs-older" href="([^"]+)"', text(response))
            url = f"{BASE}/" + older.group(1).replace("&amp;", "&") if older else None
        assert sorted(seen) == sorted([f"page-{index}" for index in range(8)] + ["no-start"]), sort
        assert pages == 3, sort


def test_a_member_saves_a_view_everyone_sees_it_and_only_its_owner_deletes_it(signed_in, client, tenant, runs):
    signed_in(tenant.viewer)
    response = client.post(f"{BASE}/views/", {"name": "Failures", "query": "status=failed&cursor=x&bogus=1"})
    assert response.status_code == 302
    assert response["Location"] == f"{BASE}/?status=failed"
    with organization_scope(tenant.organization):
        view = SavedView.objects.get()
    assert (view.owner, view.query) == (tenant.viewer, "status=failed")

    signed_in(tenant.member)
    listing = text(client.get(f"{BASE}/"))
    assert 'href="?status=failed"' in listing and "Failures" in listing
    assert f"/views/{view.pk}/delete/" not in listing, "only the owner is offered to delete it"
    client.post(f"{BASE}/views/{view.pk}/delete/")
    with organization_scope(tenant.organization):
        assert SavedView.objects.filter(pk=view.pk).exists()

    signed_in(tenant.viewer)
    assert f"/views/{view.pk}/delete/" in text(client.get(f"{BASE}/"))
    client.post(f"{BASE}/views/{view.pk}/delete/")
    with organization_scope(tenant.organization):
        assert not SavedView.objects.exists()


def test_a_saved_view_shows_as_current_when_its_filters_are_applied(signed_in, tenant, runs):
    client = signed_in(tenant.member)
    client.post(f"{BASE}/views/", {"name": "Staging", "query": "environment=staging"})

    page = text(client.get(f"{BASE}/", {"environment": "staging"}))

    assert re.search(r'class="saved-view is-current" id="saved-view-\d+">\s*<a href="\?environment=staging"', page)
    assert 'id="save-view"' not in page, "no offer to save what is already saved"


def test_a_view_name_is_unique_per_member(signed_in, tenant, runs):
    client = signed_in(tenant.member)
    client.post(f"{BASE}/views/", {"name": "Mine", "query": "status=failed"})

    response = client.post(f"{BASE}/views/", {"name": "Mine", "query": "tag=vip"}, follow=True)

    assert "already have a view named" in text(response)
    with organization_scope(tenant.organization):
        assert SavedView.objects.count() == 1


def test_a_saved_view_of_another_organization_cannot_be_deleted(signed_in, tenant, other_tenant):
    with organization_scope(other_tenant.organization):
        foreign = SavedView.objects.create(
            organization=other_tenant.organization, project=other_tenant.project, owner=tenant.owner, name="x"
        )

    response = signed_in(tenant.owner).post(f"{BASE}/views/{foreign.pk}/delete/")

    assert response.status_code == 404
    with organization_scope(other_tenant.organization):
        assert SavedView.objects.filter(pk=foreign.pk).exists()


def test_only_the_unfiltered_newest_first_page_takes_live_rows(signed_in, tenant, runs):
    client = signed_in(tenant.viewer)

    assert 'id="runs-head"' in text(client.get(f"{BASE}/"))
    for query in ("?status=failed", "?sort=cost", "?cursor=2026-01-01T00:00:00%2B00:00~5"):
        page = text(client.get(f"{BASE}/{query}"))
        assert 'id="runs-head"' not in page, query
        assert 'id="runs-new-notice" hidden' in page, query


def test_an_empty_project_shows_how_to_send_traces(signed_in, tenant):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/"))

    assert "No runs yet" in page and "/api/v1/otlp" in page
    assert 'id="runs-head"' in page, "the first run can still arrive live"


# --- A run's detail ---------------------------------------------------------------------------


def test_run_header_shows_status_totals_models_tags_session_and_environment(signed_in, tenant, runs):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/{runs['trace-a'].pk}/"))
    header = page[page.index('id="run-header"') : page.index("</section>", page.index('id="run-header"'))]

    assert "Succeeded" in header
    assert "4.00 s" in header
    assert "2,600 / 100" in header
    assert "$0.00145" in header
    assert "mistral-large-2512" in header and "vip" in header and "production" in header and "2026.11.2" in header
    assert f"{BASE}/sessions/conv-1/" in header


def test_failed_run_shows_its_error_and_unpriced_steps(signed_in, tenant, runs):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/{runs['trace-c'].pk}/"))

    assert "ToolError: the orders API timed out" in page
    assert "2 unpriced steps" in page
    assert 'class="trace-row is-error"' in page


def test_the_tree_lists_steps_depth_first_with_bars_placed_on_the_run_time_axis(signed_in, tenant, runs):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/{runs['trace-a'].pk}/"))

    rows = re.findall(r'data-kind="(\w+)" data-step-id="\d+" data-depth="(\d)"', page)
    assert rows == [("agent", "0"), ("llm", "1"), ("tool", "1"), ("llm", "1")]
    bars = re.findall(r'style="--start: ([\d.]+)%; --end: ([\d.]+)%"', page)
    # The tool runs from 1.3 s to 2.1 s of a 4 s run.
    assert bars[2] == ("32.500", "52.500")
    assert bars[0] == ("0.000", "100.000")


def test_transcript_is_a_chat_with_tool_calls_inline_and_tool_results_named(signed_in, tenant, runs):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/{runs['trace-a'].pk}/?tab=transcript"))
    chat = page[page.index('id="transcript"') :]

    roles = re.findall(r'<article class="chat-message role-(\w+)"', chat)
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    call = chat[chat.index('class="chat-tool-call"') :]
    assert "<code>lookup_order</code>" in call and "call-7" in call and "include" in call
    tool_result = chat[chat.index("chat-message role-tool") :]
    assert '<code class="chat-tool-name">lookup_order</code>' in tool_result
    assert "Your order shipped yesterday" in chat


def test_tool_call_table_lists_name_arguments_result_and_latency(signed_in, tenant, runs):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/{runs['trace-c'].pk}/?tab=tools"))
    table = page[page.index('id="tool-calls"') :]

    assert "<code>lookup_order</code>" in table
    assert "800 ms" in table
    assert "timeout after 800 ms" in table and 'class="is-error"' in table


def test_memory_tab_shows_what_changed_between_consecutive_snapshots(signed_in, tenant, runs):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/{runs['trace-a'].pk}/?tab=memory"))
    second = page[page.index("<strong>#1</strong>") :]

    changes = re.findall(r'<tr class="diff-(\w+)">\s*<td><code>([^<]+)</code>', second)
    assert changes == [("added", "orders[0]"), ("added", "last_tool"), ("removed", "mood")]
    assert "lookup_order" in second and "neutral" in second
    assert "initial state" in page


def test_json_diff_reports_added_removed_and_changed_keys_with_old_and_new_values():
    before = {"profile": {"name": "Ada", "plan": "free"}, "history": ["hi"], "draft": "x", "n": 1}
    after = {"profile": {"name": "Ada", "plan": "pro", "since": 2026}, "history": ["hi", "refund?"], "n": 1}

    changes, more = display.json_diff(before, after)

    assert [(c.path, c.kind, c.old, c.new) for c in changes] == [
        ("profile.plan", "changed", "free", "pro"),
        ("profile.since", "added", None, 2026),
        ("history[1]", "added", None, "refund?"),
        ("draft", "removed", "x", None),
    ]
    assert more is False
    assert display.json_diff({"a": list(range(10))}, {"a": []}, limit=3) == (
        [display.Change(f"a[{i}]", "removed", i, None) for i in range(3)],
        True,
    )


def test_step_fragment_shows_the_steps_payloads_and_tokens(signed_in, tenant, runs):
    run = runs["trace-a"]
    step = first_step(tenant.project, run, "llm-1")

    response = signed_in(tenant.viewer).get(f"{BASE}/{run.pk}/steps/{step.pk}/", **HTMX)
    panel = text(response)

    assert "<html" not in panel, "a fragment, not a page"
    assert "chat mistral" in panel and "mistral-large-2512" in panel
    assert "1,200 in" in panel and "40 out" in panel
    assert "gen_ai.request.temperature" in panel and "lookup_order" in panel


def test_step_panel_shows_a_message_that_only_calls_a_tool_by_its_call(signed_in, tenant, runs):
    run = runs["trace-a"]
    step = first_step(tenant.project, run, "llm-1")

    panel = text(signed_in(tenant.viewer).get(f"{BASE}/{run.pk}/steps/{step.pk}/", **HTMX))

    messages = panel[panel.index('class="step-messages"') :]
    messages = messages[: messages.index("</ol>")]
    assert "null" not in messages
    assert re.search(r"assistant</span> <span class=\"step-message-call\">calls <code>lookup_order</code>", messages)
    assert "{&quot;order&quot;: 1042, &quot;include&quot;: [&quot;eta&quot;]}" in messages


def test_step_url_without_htmx_opens_the_run_page_with_the_step_selected(signed_in, tenant, runs):
    run = runs["trace-a"]
    step = first_step(tenant.project, run, "tool-1")
    client = signed_in(tenant.viewer)

    response = client.get(f"{BASE}/{run.pk}/steps/{step.pk}/")
    assert response.status_code == 302
    page = text(client.get(response["Location"]))

    assert f'class="trace-row is-selected" data-kind="tool" data-step-id="{step.pk}"' in page
    assert 'class="step-detail"' in page and "shipped" in page


def test_multi_agent_run_shows_its_parent_and_children(signed_in, tenant):
    parent_id = multi_agent_runs(tenant.project)
    child = run_of(tenant.project, "sub-email")
    client = signed_in(tenant.viewer)

    family = text(client.get(f"{BASE}/{child.pk}/"))
    tree = family[family.index('id="run-family"') : family.index("</section>", family.index('id="run-family"'))]

    assert re.findall(r'--depth: (\d)">', tree) == ["0", "1", "1"]
    assert f"{BASE}/{parent_id}/" in tree and "(this run)" in tree
    assert f'<dt>Parent run</dt><dd><a href="{BASE}/{parent_id}/">support: Plan a refund</a>' in family


# --- Big runs stay fast and readable -------------------------------------------------------------

BIG_PAYLOAD_MARKER = "END-OF-THE-BIG-PAYLOAD"


def big_run_batch(trace_id: str = "big") -> tuple[Batch, str]:
    """A 500-step run: an agent over 25 chains of LLM and tool steps with 2-3 KB payloads
    each, one 100 KB payload, and a message per child step; and the span id of the step
    with the 100 KB input."""
    start = T0
    steps = [
        StepEvent(
            trace_id, "root", kind="agent", name="big agent", started_at=start, ended_at=start + timedelta(seconds=600)
        )
    ]
    messages = []
    for chain in range(25):
        chain_id = f"chain-{chain}"
        chain_start = start + timedelta(seconds=chain * 24)
        steps.append(
            StepEvent(
                trace_id,
                chain_id,
                parent_span_id="root",
                kind="chain",
                name=f"chain {chain}",
                started_at=chain_start,
                ended_at=chain_start + timedelta(seconds=23),
            )
        )
        for index in range(19):
            kind = "llm" if index % 2 == 0 else "tool"
            at = chain_start + timedelta(seconds=index + 0.5)
            span = f"{chain_id}-{index}"
            steps.append(
                StepEvent(
                    trace_id,
                    span,
                    parent_span_id=chain_id,
                    kind=kind,
                    name=f"{kind} {chain}.{index}",
                    model="mistral-small-2603" if kind == "llm" else "",
                    input_tokens=500 if kind == "llm" else 0,
                    output_tokens=50 if kind == "llm" else 0,
                    started_at=at,
                    ended_at=at + timedelta(seconds=0.8),
                    input={"prompt": "x" * 2000, "history": [{"n": n} for n in range(20)]},
                    output={"text": "y" * 1000},
                    attributes={f"attribute.{n}": "z" * 50 for n in range(20)},
                )
            )
            messages.append(
                MessageEvent(trace_id, f"{span}:out:0", len(messages), "assistant", f"answer {span}", span_id=span)
            )
    steps = steps[:500]  # the agent, 25 chains and their children, less the last child
    steps[2].input = {"document": "lorem ipsum " * 8500 + BIG_PAYLOAD_MARKER}
    return Batch(steps=steps, messages=messages), steps[2].span_id


@pytest.fixture
def big_run(tenant):
    batch, big_span = big_run_batch()
    store(tenant.project, batch)
    run = run_of(tenant.project, "big")
    return run, first_step(tenant.project, run, big_span)


def test_a_500_step_run_renders_every_tab_in_a_bounded_number_of_queries(
    signed_in, tenant, big_run, django_assert_max_num_queries
):
    run, _big_step = big_run
    client = signed_in(tenant.viewer)
    client.get(f"{BASE}/")  # the session and the user are loaded once, like any later request

    for tab in ("trace", "transcript", "tools", "memory"):
        with django_assert_max_num_queries(15):
            response = client.get(f"{BASE}/{run.pk}/?tab={tab}")
        assert response.status_code == 200
    with django_assert_max_num_queries(15):
        live = client.get(f"{BASE}/{run.pk}/live/?tab=trace", **HTMX)
    assert len(re.findall(r'<li class="trace-row[ "]', text(live))) == 500
    assert BIG_PAYLOAD_MARKER not in text(live), "the tree never loads payloads"


def test_a_run_beyond_the_page_limits_shows_its_first_rows_and_says_so(signed_in, tenant, runs, monkeypatch):
    from runs.views import run_tabs

    monkeypatch.setattr(run_tabs, "STEP_LIMIT", 2)
    monkeypatch.setattr(run_tabs, "MESSAGE_LIMIT", 3)
    client = signed_in(tenant.viewer)
    run = runs["trace-a"]

    trace = text(client.get(f"{BASE}/{run.pk}/"))
    transcript = text(client.get(f"{BASE}/{run.pk}/?tab=transcript"))

    assert len(re.findall(r'<li class="trace-row[ "]', trace)) == 2
    assert "the first 2 steps (by start time) are shown" in trace
    assert len(re.findall(r'<article class="chat-message', transcript)) == 3
    assert "the first 3 messages are shown" in transcript


def test_a_100_kb_payload_is_cut_in_the_step_panel_and_shown_in_full_on_demand(signed_in, tenant, big_run):
    run, big_step = big_run
    client = signed_in(tenant.viewer)

    panel = client.get(f"{BASE}/{run.pk}/steps/{big_step.pk}/", **HTMX)
    full = client.get(f"{BASE}/{run.pk}/values/step/{big_step.pk}/input/", **HTMX)
    raw = client.get(f"{BASE}/{run.pk}/values/step/{big_step.pk}/input/?raw=1")

    assert len(panel.content) < 30_000
    assert BIG_PAYLOAD_MARKER not in text(panel)
    assert f'hx-get="{BASE}/{run.pk}/values/step/{big_step.pk}/input/"' in text(panel)
    assert "Show all" in text(panel)
    assert BIG_PAYLOAD_MARKER in text(full)
    assert raw["Content-Type"].startswith("application/json") and BIG_PAYLOAD_MARKER in text(raw)


def test_render_json_cuts_to_its_budget_and_survives_any_nesting():
    rendered = display.render_json({"items": [{"text": "word " * 1000}] * 50})
    assert rendered.truncated and len(rendered.html) < 8_000
    assert "more</div>" in rendered.html

    deep = current = {}
    for _ in range(3000):
        current["next"] = current = {}
    assert "nested deeper than" in display.render_json(deep).html

    escaped = display.render_json({"<script>": "</script><b>"}).html
    assert "<script>" not in escaped and "&lt;/script&gt;" in escaped
    assert display.render_json({"small": 1}).truncated is False


# --- Sessions and the dashboard ------------------------------------------------------------------


def test_sessions_list_counts_runs_per_conversation(signed_in, tenant, runs):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/sessions/"))

    row = page[page.index(f'href="{BASE}/sessions/conv-1/"') :].split("</tr>")[0]
    assert re.search(r'<td class="num">2</td>', row)
    assert "$0.0029" in row  # two runs of $0.00145


def test_older_sessions_pages_follow_the_last_session_without_repeats(signed_in, tenant, monkeypatch):
    from runs.views import sessions

    monkeypatch.setattr(sessions, "PAGE_SIZE", 2)
    batch = Batch()
    for index in range(5):
        # Sessions 0 and 1 were last active at the same moment: the session id breaks the tie.
        batch.steps.append(
            StepEvent(
                f"s-trace-{index}",
                "root",
                kind="agent",
                started_at=T0 + timedelta(minutes=max(index, 1)),
                run_hints={"session_id": f"session-{index}"},
            )
        )
    store(tenant.project, batch)
    client = signed_in(tenant.viewer)

    seen, url = [], f"{BASE}/sessions/"
    while url:
        page = text(client.get(url))
        seen += re.findall(r'href="/o/acme/p/agent/runs/sessions/([^/"]+)/"', page)
        older = re.search(r'href="(\?range=[^"]*cursor=[^"]+)">Older', page)
        url = f"{BASE}/sessions/" + older.group(1).replace("&amp;", "&") if older else None

    assert seen == ["session-4", "session-3", "session-2", "session-1", "session-0"]


def test_session_page_lists_the_conversations_runs_in_order_with_their_text(signed_in, tenant, runs):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/sessions/conv-1/"))

    turns = re.findall(r'id="session-run-(\d+)"', page)
    assert turns == [str(runs["trace-a"].pk), str(runs["trace-b"].pk)]
    assert "Where is my order #1042?" in page and "Refund?" in page
    assert "Your order shipped yesterday" in page
    assert signed_in(tenant.viewer).get(f"{BASE}/sessions/no-such-session/").status_code == 404


def _download_lines(response) -> list[dict]:
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    return [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]


def test_the_run_page_links_to_the_run_s_trajectory(signed_in, tenant, runs):
    client = signed_in(tenant.viewer)
    run = runs["trace-a"]
    page = text(client.get(f"{BASE}/{run.pk}/"))
    link = re.search(r'<a href="([^"]+)" id="run-trajectory" download', page)
    assert link, "the run page offers its trajectory"
    (line,) = _download_lines(client.get(link[1]))
    assert line["format"] == "agentops.trajectory/1" and line["run"]["trace_id"] == "trace-a"
    assert {"role": "user", "content": "Where is my order #1042?"} in line["messages"]


def test_the_session_page_links_to_the_conversation_s_trajectory(signed_in, tenant, runs):
    client = signed_in(tenant.viewer)
    page = text(client.get(f"{BASE}/sessions/conv-1/"))
    link = re.search(r'href="([^"]+)" id="session-trajectory" download', page)
    assert link, "the session page offers its trajectory"
    lines = _download_lines(client.get(link[1].replace("&amp;", "&")))
    assert [(line["turn"], line["run"]["trace_id"]) for line in lines] == [(1, "trace-a"), (2, "trace-b")]
    assert {line["session"]["id"] for line in lines} == {"conv-1"}
    assert client.get(f"{BASE}/trajectory/?session=no-such-session").status_code == 404
    assert client.get(f"{BASE}/trajectory/").status_code == 404


def test_dashboard_shows_totals_and_loads_plotly_from_local_static_files(signed_in, tenant, runs):
    client = signed_in(tenant.viewer)
    page = text(client.get(f"{BASE}/dashboard/"))

    totals = page[page.index('id="dashboard-totals"') :]
    assert re.search(r'id="total-runs">3<', totals)
    assert re.search(r'id="total-success">66.7%<', totals)
    assert re.search(r'id="total-cost">\$0.0029<', totals)
    assert "2 unpriced steps" in totals
    scripts = re.findall(r'<script src="([^"]+)"', page)
    assert "/static/vendor/plotly/plotly.min.js" in scripts
    assert all(src.startswith("/static/") for src in scripts), "no CDN"
    static = client.get("/static/vendor/plotly/plotly.min.js")
    assert static.status_code == 200
    assert b"plotly.js" in b"".join(static.streaming_content)[:200]
    assert '<script id="dashboard-data" type="application/json">' in page


def test_dashboard_time_range_picker_narrows_the_totals(signed_in, tenant, runs):
    client = signed_in(tenant.viewer)

    last_hour = text(client.get(f"{BASE}/dashboard/", {"range": "1h"}))
    custom = text(
        client.get(
            f"{BASE}/dashboard/",
            {
                "range": "custom",
                "started_after": (T0 + timedelta(minutes=4)).strftime("%Y-%m-%dT%H:%M"),
                "started_before": (T0 + timedelta(minutes=8)).strftime("%Y-%m-%dT%H:%M"),
            },
        )
    )

    assert "No runs in this time range" in last_hour
    assert re.search(r'id="total-runs">1<', custom)


# --- Live updates ---------------------------------------------------------------------------------


def test_live_update_of_a_new_run_carries_its_row_for_the_top_of_the_list(tenant, runs):
    run = runs["trace-b"]
    with organization_scope(tenant.organization):
        messages = dict(render_runs_ingested(project=tenant.project, runs=[{"id": run.pk, "new": True}]))

    assert set(messages) == {"runs", "runs-notice"}, "a new run has no page nor row open anywhere yet"
    new = messages["runs"]
    assert new.startswith('<table hx-swap-oob="afterend:#runs-head">')
    assert f'<tbody id="run-{run.pk}" class="run-row is-fresh">' in new
    assert "support: Refund?" in new and f"{BASE}/{run.pk}/" in new
    assert "runs-new-notice" not in new, "lists that take new rows have no notice"
    assert messages["runs-notice"].startswith('<div id="runs-new-notice"')


def test_live_update_of_a_large_batch_keeps_the_newest_new_runs(tenant, runs, monkeypatch):
    from runs import live as runs_live

    monkeypatch.setattr(runs_live, "MAX_ROWS", 1)
    changed, new = runs["trace-a"], runs["trace-c"]
    batch = [{"id": runs["trace-b"].pk, "new": False}, {"id": changed.pk, "new": False}, {"id": new.pk, "new": True}]
    with organization_scope(tenant.organization):
        messages = render_runs_ingested(project=tenant.project, runs=batch)

    (new_message,) = [html for topic, html in messages if topic == "runs"]
    assert f'id="run-{new.pk}"' in new_message
    assert [topic for topic, _html in messages if topic.startswith("run-row:")] == [f"run-row:{runs['trace-b'].pk}"]


def test_live_update_of_a_changed_run_replaces_its_row_and_refreshes_its_page(tenant, runs):
    run = runs["trace-a"]
    with organization_scope(tenant.organization):
        messages = dict(render_runs_ingested(project=tenant.project, runs=[{"id": run.pk, "new": False}]))

    assert set(messages) == {f"run-row:{run.pk}", f"run:{run.pk}"}
    assert messages[f"run-row:{run.pk}"].startswith(f'<tbody id="run-{run.pk}" class="run-row" hx-swap-oob="true">')
    assert messages[f"run:{run.pk}"].startswith(f'<div id="run-refresh-{run.pk}" hx-swap-oob="true"')


def test_live_update_renders_only_what_an_open_page_shows(tenant, runs):
    shown, hidden = runs["trace-a"], runs["trace-b"]
    batch = [{"id": shown.pk, "new": False}, {"id": hidden.pk, "new": False}]
    with organization_scope(tenant.organization):
        messages = render_runs_ingested(project=tenant.project, runs=batch, listening={f"run-row:{shown.pk}"})

    assert [topic for topic, _html in messages] == [f"run-row:{shown.pk}"]


def test_live_fragment_rerenders_the_header_and_open_tab_out_of_band(signed_in, tenant, runs):
    run = runs["trace-a"]
    client = signed_in(tenant.viewer)

    trace = text(client.get(f"{BASE}/{run.pk}/live/?tab=trace", **HTMX))
    memory = text(client.get(f"{BASE}/{run.pk}/live/?tab=memory", **HTMX))

    assert '<section class="card run-header" id="run-header" hx-swap-oob="true">' in trace
    assert '<div class="card trace" id="run-steps" hx-swap-oob="true">' in trace
    assert '<nav class="tabs run-tabs" id="run-tabs" aria-label="Run sections" hx-swap-oob="true">' in trace
    assert '<div id="run-tab-body" class="run-tab-body" hx-swap-oob="true">' in memory
    assert "diff-table" in memory


def test_ingest_announces_the_new_rows_to_the_top_of_the_runs_list(tenant, django_capture_on_commit_callbacks):
    layer = get_channel_layer()
    group = group_name(project_id=tenant.project.pk, topic="runs")

    async def join():
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        return channel

    async def receive(channel):
        # In one event loop: the Redis layer's receive buffer belongs to the loop that reads it.
        try:
            return await asyncio.wait_for(layer.receive(channel), 5)
        finally:
            await layer.group_discard(group, channel)

    channel = async_to_sync(join)()
    with django_capture_on_commit_callbacks(execute=True):
        store(tenant.project, support_run("announced", start=T0, question="Live question?"), announce=True)
    first = async_to_sync(receive)(channel)

    run = run_of(tenant.project, "announced")
    assert first["event"] == "runs.ingested" and first["data"] == {"runs": [{"id": run.pk, "new": True}]}
    assert f'<tbody id="run-{run.pk}"' in first["html"] and "Live question?" in first["html"]
    assert first["follow"] == [f"run-row:{run.pk}"], "the list shows that row from now on"


def test_a_failing_live_render_never_fails_the_ingest(tenant, monkeypatch, django_capture_on_commit_callbacks):
    import runs.live

    def broken(**kwargs):
        raise RuntimeError("template exploded")

    monkeypatch.setattr(runs.live, "render_runs_ingested", broken)
    with django_capture_on_commit_callbacks(execute=True):
        result = store(tenant.project, support_run("still-stored", start=T0), announce=True)

    assert result.runs_created
    assert run_of(tenant.project, "still-stored").step_count == 4


# --- Formatting ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (Decimal("0"), "$0.00"),
        (Decimal("2.000000000"), "$2.00"),
        (Decimal("0.001450000"), "$0.00145"),
        (Decimal("0.1") + Decimal("0.2"), "$0.30"),
        (Decimal("1234.5"), "$1,234.50"),
        (Decimal("0.0000015"), "$0.000002"),
        (Decimal("0.000000001"), "<$0.000001"),
        (Decimal("-0.25"), "-$0.25"),
        (None, "—"),
    ],
)
def test_money_is_shown_exactly_from_decimals(amount, shown):
    from runs.templatetags.runs_format import money

    assert money(amount) == shown


@pytest.mark.parametrize(
    ("milliseconds", "shown"),
    [
        (None, "—"),
        (0, "0 ms"),
        (850.4, "850 ms"),
        (1240, "1.24 s"),
        (12_500, "12.5 s"),
        (125_000, "2m 05s"),
        (3_720_000, "1h 02m"),
    ],
)
def test_durations_read_naturally(milliseconds, shown):
    from runs.templatetags.runs_format import duration

    assert duration(milliseconds) == shown


def test_token_counts_group_digits_then_abbreviate():
    from runs.templatetags.runs_format import tokens

    assert [tokens(n) for n in (0, 12_345, 124_500, 2_500_000)] == ["0", "12,345", "124.5k", "2.5M"]


def session_links(page: str) -> list[str]:
    return re.findall(r'href="(/o/acme/p/agent/runs/sessions/[^"]+)"', page)


def test_a_session_id_with_a_newline_breaks_neither_the_run_page_nor_the_sessions_list(signed_in, tenant):
    # An agent chooses its session ids; one newline used to make {% url %} fail (a 500
    # on the run's page and on the sessions list of the whole project).
    run = agent_run(tenant.project, "poisoned", session_id="line one\nline two")
    client = signed_in(tenant.viewer)

    assert client.get(f"{BASE}/{run.pk}/").status_code == 200
    assert client.get(f"{BASE}/{run.pk}/live/?tab=trace", **HTMX).status_code == 200
    sessions = client.get(f"{BASE}/sessions/")
    assert sessions.status_code == 200
    (link,) = set(session_links(text(sessions)))
    session_page = client.get(link)
    assert session_page.status_code == 200 and "poisoned" in text(session_page)


def test_a_session_id_cannot_point_its_link_at_another_page(signed_in, tenant):
    # "../" in a session id used to land in the href as is: the browser resolves the
    # link to any page of the site (here the organization's settings).
    run = agent_run(tenant.project, "traversal", session_id="../../../../settings")
    client = signed_in(tenant.viewer)

    for page in (text(client.get(f"{BASE}/{run.pk}/")), text(client.get(f"{BASE}/sessions/"))):
        links = session_links(page)
        assert links, "the session is linked"
        for link in links:
            assert "/../" not in link and "/sessions/..%2F..%2F..%2F..%2Fsettings/" in link, link
    session_page = client.get(session_links(text(client.get(f"{BASE}/sessions/")))[0])
    assert session_page.status_code == 200 and "traversal" in text(session_page)


def test_model_names_reach_the_dashboard_chart_as_text_not_as_plotly_markup(signed_in, tenant):
    # Plotly draws labels as its own HTML subset (<a href>, <span style>...): a model
    # name sent by an agent used to become a clickable link inside the chart.
    agent_run(tenant.project, "phish", model='<a href="https://evil.example/login">gpt-4o</a>')
    page = text(signed_in(tenant.viewer).get(f"{BASE}/dashboard/"))

    data = json.loads(re.search(r'<script id="dashboard-data" type="application/json">(.*?)</script>', page).group(1))
    assert data["cost_by_model"]["models"] == ['&lt;a href="https://evil.example/login"&gt;gpt-4o&lt;/a&gt;']
    assert '<a href="https://evil.example' not in page


def test_agent_strings_are_escaped_on_every_runs_page_fragment_and_live_update(signed_in, tenant):
    run = hostile_run(tenant.project)
    with organization_scope(tenant.organization):
        step = run.steps.get()
        message = run.messages.get(message_id="m1")
        call = run.tool_calls.get()
        snapshot = run.memory_snapshots.get(snapshot_id="a")
    client = signed_in(tenant.viewer)
    detail = f"{BASE}/{run.pk}"
    pages = [
        (f"{BASE}/", {}),
        (f"{BASE}/?{urlencode({'q': 'alert', 'tag': XSS[:100], 'agent': XSS})}", {}),
        (f"{BASE}/sessions/", {}),
        (f"{BASE}/dashboard/", {}),
        *[(f"{detail}/?tab={tab}", {}) for tab in ("trace", "transcript", "tools", "memory")],
        (f"{detail}/?tab=trace&step={step.pk}", {}),
        (f"{detail}/steps/{step.pk}/", HTMX),
        *[(f"{detail}/live/?tab={tab}", HTMX) for tab in ("trace", "transcript", "tools", "memory")],
        *[
            (f"{detail}/values/step/{step.pk}/{field}/", headers)
            for field in ("input", "output", "attributes", "events", "error")
            for headers in ({}, HTMX)
        ],
        (f"{detail}/values/message/{message.pk}/content/", {}),
        (f"{detail}/values/message/{message.pk}/tool_calls/", HTMX),
        (f"{detail}/values/toolcall/{call.pk}/arguments/", HTMX),
        (f"{detail}/values/memory/{snapshot.pk}/state/", {}),
        (f"{detail}/values/run/{run.pk}/metadata/", {}),
    ]
    session_link = session_links(text(client.get(f"{BASE}/sessions/")))[0]
    pages.append((session_link, {}))
    for url, headers in pages:
        response = client.get(url, **headers)
        assert response.status_code == 200, url
        body = text(response)
        assert "<img src=x" not in body and "<script>alert" not in body, url
    with organization_scope(tenant.organization):
        live = "".join(
            html for _, html in render_runs_ingested(project=tenant.project, runs=[{"id": run.pk, "new": True}])
        )
        live += "".join(
            html for _, html in render_runs_ingested(project=tenant.project, runs=[{"id": run.pk, "new": False}])
        )
    assert "<img src=x" not in live and "<script>alert" not in live
    assert "&lt;img src=x" in live


def test_posts_of_the_runs_pages_need_the_csrf_token(tenant):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(tenant.admin)
    with organization_scope(tenant.organization):
        view = SavedView.objects.create(
            organization=tenant.organization, project=tenant.project, owner=tenant.admin, name="mine"
        )

    assert browser.post(f"{BASE}/settings/", {"retention_days": "1"}).status_code == 403
    assert browser.post(f"{BASE}/views/", {"name": "x", "query": "status=failed"}).status_code == 403
    assert browser.post(f"{BASE}/views/{view.pk}/delete/").status_code == 403
    with organization_scope(tenant.organization):
        assert SavedView.objects.filter(pk=view.pk).exists() and not IngestSettings.objects.exists()


def test_a_saved_view_of_a_sibling_project_is_neither_listed_nor_deleted_here(signed_in, tenant):
    sibling = ProjectFactory(organization=tenant.organization, name="Billing bot", slug="billing-bot")
    with organization_scope(tenant.organization):
        foreign = SavedView.objects.create(
            organization=tenant.organization, project=sibling, owner=tenant.member, name="Sibling view"
        )
    client = signed_in(tenant.member)  # its own owner, through the wrong project's URL

    assert "Sibling view" not in text(client.get(f"{BASE}/"))
    assert client.post(f"{BASE}/views/{foreign.pk}/delete/").status_code == 404
    with organization_scope(tenant.organization):
        assert SavedView.objects.filter(pk=foreign.pk).exists()


@pytest.mark.parametrize(("kind", "field"), [("message", "content"), ("toolcall", "arguments"), ("memory", "state")])
def test_the_values_fragment_reaches_no_row_of_another_run_or_project(signed_in, tenant, kind, field):
    own = hostile_run(tenant.project)
    sibling = ProjectFactory(organization=tenant.organization, name="Billing bot", slug="billing-bot")
    foreign = hostile_run(sibling)
    other_run = agent_run(tenant.project, "other")
    model = {"message": "messages", "toolcall": "tool_calls", "memory": "memory_snapshots"}[kind]
    with organization_scope(tenant.organization):
        own_row = getattr(own, model).first()
        foreign_row = getattr(foreign, model).first()
    client = signed_in(tenant.owner)

    assert client.get(f"{BASE}/{own.pk}/values/{kind}/{own_row.pk}/{field}/", **HTMX).status_code == 200
    for url in (
        f"{BASE}/{own.pk}/values/{kind}/{foreign_row.pk}/{field}/",  # a sibling project's row
        f"{BASE}/{other_run.pk}/values/{kind}/{own_row.pk}/{field}/",  # another run's row
        f"{BASE}/{foreign.pk}/values/{kind}/{foreign_row.pk}/{field}/",  # a sibling project's run
        f"{BASE}/{own.pk}/values/{kind}/{own_row.pk}/organization_id/",  # not a payload field
        f"{BASE}/{own.pk}/values/{kind}/{own_row.pk}/run/",
    ):
        assert client.get(url, **HTMX).status_code == 404, url
        assert client.get(f"{url}?raw=1").status_code == 404, url


def test_live_updates_render_no_run_of_another_project(tenant, other_tenant):
    own = agent_run(tenant.project, "own-run")
    foreign = agent_run(other_tenant.project, "foreign-run")
    with organization_scope(tenant.organization):
        html = "".join(
            fragment
            for _, fragment in render_runs_ingested(
                project=tenant.project, runs=[{"id": own.pk, "new": True}, {"id": foreign.pk, "new": True}]
            )
        )
    assert "own-run" in html and "foreign-run" not in html


def test_the_run_page_shows_its_energy_and_co2e_beside_its_cost(signed_in, tenant):
    from datetime import UTC, datetime

    from tests.billing.factories import build_ledger, make_run, make_step

    run = make_run(tenant.project, started_at=datetime(2026, 11, 2, 12, tzinfo=UTC))
    make_step(run, model="mistral-large-2512", input_tokens=800, output_tokens=200, cost="0.01")
    build_ledger(run)
    body = signed_in(tenant.viewer).get(f"{BASE}/{run.pk}/").content.decode()
    # 1k tokens x 6.0 Wh per 1k (Mistral Large) on the default grid (473 g/kWh).
    assert "≈ 6.00 Wh · 2.84 g CO2e" in body and 'id="run-carbon"' in body


def test_the_dashboard_splits_the_projects_spend_into_categories(signed_in, tenant, other_tenant):
    from datetime import UTC, datetime

    from tests.billing.factories import ledger_row

    today = datetime.now(UTC).date()
    ledger_row(tenant.project, day=today, model="mistral-large-2512", cost="1.00", steps=2, unit="token")
    ledger_row(tenant.project, day=today, model="tts", cost="0.30", category="tool", unit="character", steps=3)
    ledger_row(tenant.project, day=today, model="gpu:a100", cost="4", category="gpu", unit="hour", agent_name="gpu-job")
    ledger_row(
        tenant.project, day=today, model="mistral-small", cost="0.05", category="evaluation", agent_name="llm-judge"
    )
    ledger_row(other_tenant.project, day=today, model="tts", cost="9", category="tool", unit="character")
    response = signed_in(tenant.viewer).get(f"{BASE}/dashboard/?range=7d")
    assert {row["category"]: row["cost"] for row in response.context["categories"]} == {
        "llm": Decimal("1.00"),
        "tool": Decimal("0.30"),
        "gpu": Decimal("4"),
        "evaluation": Decimal("0.05"),
    }
    body = response.content.decode()
    assert 'id="dashboard-categories"' in body and "per character" in body


def test_the_run_page_shows_usage_parts_and_the_reported_beside_the_computed_cost(signed_in, tenant):
    at = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
    step = StepEvent(
        trace_id="reported",
        span_id="llm-1",
        kind="llm",
        model="claude-sonnet-4-5",
        started_at=at,
        ended_at=at + timedelta(seconds=1),
        input_tokens=10_000,
        cached_input_tokens=6_000,
        cache_write_input_tokens=2_000,
        output_tokens=3_000,
        reasoning_output_tokens=1_000,
        modality_tokens={"input": {"image": 1_500}},
        reported_cost=Decimal("0.09"),
        reported_cost_currency="USD",
        reported_cost_source="provider",
    )
    with organization_scope(tenant.organization):
        ingest(project=tenant.project, runs=[RunEvent(trace_id="reported")], steps=[step])
        run = Run.objects.get(trace_id="reported")
        stored = Step.objects.get(run=run)
    client = signed_in(tenant.viewer)

    page = text(client.get(f"{BASE}/{run.pk}/"))
    assert 'id="run-reported-cost">$0.09' in page
    assert "computed for those steps: $0.0603 · differs" in page
    assert "6,000 cached 2,000 cache write 1,000 reasoning" in page
    panel = text(client.get(f"{BASE}/{run.pk}/steps/{stored.pk}/", **HTMX))
    assert (
        "10,000 in (6,000 cached, 2,000 written to the cache) · 3,000 out (1,000 reasoning) · 1,500 image input"
        in panel
    )
    assert "differs from the computed cost" in panel
