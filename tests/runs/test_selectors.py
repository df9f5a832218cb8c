"""Reads of the trace store: filters, tree, transcript, sessions, dashboard."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from agentops.errors import NotFound
from agentops.scoping import organization_scope
from runs import selectors
from runs.events import MessageEvent, StepEvent
from runs.ingest import ingest
from runs.models import Run

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _at(s):
    return T0 + timedelta(seconds=s)


def _load(project):
    steps = []
    for n in range(3):
        trace = f"t{n}"
        steps += [
            StepEvent(
                trace_id=trace,
                span_id="root",
                kind="agent",
                name=f"run {n}",
                started_at=_at(n * 100),
                ended_at=_at(n * 100 + 10 * (n + 1)),
                status="error" if n == 2 else "ok",
                input={"q": f"question about {'refunds' if n == 1 else 'weather'}"},
                run_hints={"session_id": "s-a" if n < 2 else "s-b", "tags": ["prod"] if n else []},
            ),
            StepEvent(
                trace_id=trace,
                span_id="llm",
                parent_span_id="root",
                kind="llm",
                model="mistral-small-2603",
                started_at=_at(n * 100 + 1),
                ended_at=_at(n * 100 + 2),
                input_tokens=100,
                output_tokens=10,
            ),
            StepEvent(
                trace_id=trace,
                span_id="tool",
                parent_span_id="llm",
                kind="tool",
                started_at=_at(n * 100 + 3),
                ended_at=_at(n * 100 + 4),
            ),
            StepEvent(trace_id=trace, span_id="orphan", parent_span_id="missing", started_at=_at(n * 100 + 5)),
        ]
    ingest(project=project, steps=steps, announce=False)


def test_filters_and_full_text(tenant):
    project = tenant.project
    with organization_scope(project.organization):
        _load(project)
        names = lambda f: [r.name for r in selectors.run_list(project=project, filters=f)]  # noqa: E731
        assert names(selectors.RunFilters()) == ["run 2", "run 1", "run 0"]
        assert names(selectors.RunFilters(status=["failed"])) == ["run 2"]
        assert names(selectors.RunFilters(tag="prod")) == ["run 2", "run 1"]
        assert names(selectors.RunFilters(q="refunds")) == ["run 1"]
        assert names(selectors.RunFilters(min_latency_ms=15_000)) == ["run 2", "run 1"]
        assert names(selectors.RunFilters(model="mistral-small-2603", session="s-a")) == ["run 1", "run 0"]


def test_tree_keeps_orphans_as_roots(tenant):
    project = tenant.project
    with organization_scope(project.organization):
        _load(project)
        run = selectors.run_list(project=project).get(trace_id="t0")
        flat = [(n.step.span_id, n.depth) for n in selectors.flatten_tree(selectors.step_tree(run=run))]
    assert flat == [("root", 0), ("llm", 1), ("tool", 2), ("orphan", 0)]


def test_transcript_drops_repeated_history(tenant):
    project = tenant.project
    history = [("system", "be brief"), ("user", "hi")]
    events = [
        MessageEvent(trace_id="t", message_id=f"a:in:{i}", position=i, role=r, content=c, span_id="a")
        for i, (r, c) in enumerate(history)
    ]
    events.append(MessageEvent(trace_id="t", message_id="a:out:0", position=10, role="assistant", content="hello"))
    events += [
        MessageEvent(trace_id="t", message_id=f"b:in:{i}", position=20 + i, role=r, content=c)
        for i, (r, c) in enumerate([*history, ("assistant", "hello"), ("user", "bye")])
    ]
    with organization_scope(project.organization):
        ingest(project=project, messages=events, announce=False)
        run = selectors.run_list(project=project).get()
        lines = [(m.role, m.content) for m in selectors.transcript(run=run)]
    assert lines == [("system", "be brief"), ("user", "hi"), ("assistant", "hello"), ("user", "bye")]


def test_a_tools_answer_repeated_as_json_text_in_the_next_call_is_shown_once(tenant):
    project = tenant.project
    call = [{"id": "c1", "name": "weather", "arguments": {"city": "Paris"}}]
    events = [
        MessageEvent(trace_id="t", message_id="a:in:0", position=0, role="user", content="weather?"),
        MessageEvent(trace_id="t", message_id="a:out:0", position=10, role="assistant", content=None, tool_calls=call),
        # From the tool span (runs.otlp.spans): the answer as an object.
        MessageEvent(
            trace_id="t", message_id="tool:tool", position=15, role="tool", content={"t": 21}, tool_call_id="c1"
        ),
        # The next model call's input repeats the history, the answer as JSON text.
        MessageEvent(trace_id="t", message_id="b:in:0", position=20, role="user", content="weather?"),
        MessageEvent(trace_id="t", message_id="b:in:1", position=21, role="assistant", content=None, tool_calls=call),
        MessageEvent(
            trace_id="t", message_id="b:in:2", position=22, role="tool", content='{"t": 21}', tool_call_id="c1"
        ),
        MessageEvent(trace_id="t", message_id="b:out:0", position=30, role="assistant", content="21 degrees"),
    ]
    with organization_scope(project.organization):
        ingest(project=project, messages=events, announce=False)
        run = selectors.run_list(project=project).get()
        lines = [(m.role, m.content) for m in selectors.transcript(run=run)]
    assert lines == [("user", "weather?"), ("assistant", None), ("tool", {"t": 21}), ("assistant", "21 degrees")]


def test_sessions_and_dashboard(tenant):
    project = tenant.project
    with organization_scope(project.organization):
        _load(project)
        sessions = {s["session_id"]: s["run_count"] for s in selectors.session_list(project=project)}
        board = selectors.dashboard(project=project, start=T0 - timedelta(hours=1), end=T0 + timedelta(hours=1))
    assert sessions == {"s-a": 2, "s-b": 1}
    totals = board["totals"]
    assert (totals["runs"], totals["failed"], totals["input_tokens"]) == (3, 1, 300)
    assert totals["success_rate"] == 2 / 3
    assert totals["p50_latency_ms"] == 20_000.0
    assert board["cost_by_model"][0]["model"] == "mistral-small-2603"


def test_transcript_keeps_a_user_message_repeated_in_the_conversation(tenant):
    """Each LLM call's input repeats the history: only the repetition is left out, not a
    second "yes" the user really sent."""
    project = tenant.project
    calls = [
        [("user", "delete the file?")],
        [("user", "delete the file?"), ("assistant", "Sure?"), ("user", "yes")],
        [
            ("user", "delete the file?"),
            ("assistant", "Sure?"),
            ("user", "yes"),
            ("assistant", "Really?"),
            ("user", "yes"),
        ],
    ]
    answers = ["Sure?", "Really?", "Deleted."]
    events = []
    for call, (inputs, answer) in enumerate(zip(calls, answers, strict=True)):
        span = f"llm{call}"
        events += [
            MessageEvent(
                trace_id="t", message_id=f"{span}:in:{i}", position=call * 1000 + i, role=r, content=c, span_id=span
            )
            for i, (r, c) in enumerate(inputs)
        ]
        events.append(
            MessageEvent(
                trace_id="t",
                message_id=f"{span}:out:0",
                position=call * 1000 + 500,
                role="assistant",
                content=answer,
                span_id=span,
            )
        )
    with organization_scope(project.organization):
        ingest(project=project, messages=events, announce=False)
        run = Run.objects.get(project=project)
        lines = [(m.role, m.content) for m in selectors.transcript(run=run)]
    assert lines == [
        ("user", "delete the file?"),
        ("assistant", "Sure?"),
        ("user", "yes"),
        ("assistant", "Really?"),
        ("user", "yes"),
        ("assistant", "Deleted."),
    ]


def test_full_text_search_finds_a_word_at_the_start_of_a_line(tenant):
    """The search text is the payloads' JSON, where a newline is the two characters
    backslash and n: "hello\\nworld" was indexed as "hello" and "nworld"."""
    project = tenant.project
    root = StepEvent(
        trace_id="t", span_id="r", started_at=_at(0), ended_at=_at(1), input="Dear team,\nrefund\tinvoice 42"
    )
    with organization_scope(project.organization):
        ingest(project=project, steps=[root], announce=False)
        found = {
            q: selectors.run_list(project=project, filters=selectors.RunFilters(q=q)).count()
            for q in ("refund", "invoice", "team", '"dear team" -nothing', "C:\\ (x) & | ! <->")
        }
    assert found == {"refund": 1, "invoice": 1, "team": 1, '"dear team" -nothing': 1, "C:\\ (x) & | ! <->": 0}


def test_run_detail_of_another_tenants_run_raises_the_cores_not_found(tenant, other_tenant):
    with organization_scope(other_tenant.organization):
        _load(other_tenant.project)
        theirs = selectors.run_list(project=other_tenant.project).first()

    with organization_scope(tenant.organization), pytest.raises(NotFound, match="run not found"):
        selectors.run_detail(project=tenant.project, run_id=theirs.pk)


# --- The dashboard's LLM cost by model, from the hourly rollup -------------------------


def _raw_cost_by_model(project, start, end):
    """What the dashboard showed before the rollup: the steps themselves, summed."""
    from django.db.models import Count, F, Sum

    from runs.models import Step

    return list(
        Step.objects.filter(project=project, kind=Step.Kind.LLM, started_at__gte=start, started_at__lt=end)
        .exclude(model="")
        .values("model")
        .annotate(cost=Sum("cost"), calls=Count("id"))
        .order_by(F("cost").desc(nulls_last=True), "model")
    )


def _rollup(project):
    """The rollup's rows summed per hour and model (a key may have several rows)."""
    from django.db.models import Sum

    from runs.models import LlmHourly

    return {
        (row["hour"], row["model"]): (row["calls"], row["priced_calls"], row["cost"])
        for row in LlmHourly.objects.filter(project=project)
        .values("hour", "model")
        .annotate(calls=Sum("calls"), priced_calls=Sum("priced_calls"), cost=Sum("cost"))
        if row["calls"] or row["priced_calls"] or row["cost"]
    }


def _raw_rollup(project):
    from django.db.models import Count, Sum
    from django.db.models.functions import TruncHour

    from runs.models import Step

    return {
        (row["hour"], row["model"]): (row["calls"], row["priced_calls"], row["cost"] or 0)
        for row in Step.objects.filter(project=project, kind=Step.Kind.LLM, started_at__isnull=False)
        .exclude(model="")
        .annotate(hour=TruncHour("started_at"))
        .values("hour", "model")
        .annotate(calls=Count("id"), priced_calls=Count("cost"), cost=Sum("cost"))
    }


# Windows with whole hours inside and parts of hours at either end, one within an hour.
WINDOWS = [
    (T0 - timedelta(hours=1), T0 + timedelta(hours=3)),
    (T0 + timedelta(minutes=20), T0 + timedelta(hours=2, minutes=40)),
    (T0 + timedelta(minutes=10), T0 + timedelta(minutes=50)),
    (T0 - timedelta(days=1, minutes=7), T0 + timedelta(days=1, seconds=3)),
]


def _llm_steps(project, trace, *, model_of, cost_of):
    """An hour and a half of model calls every 10 minutes (a few unpriced)."""
    from runs.models import Run, Step

    run = Run.dangerously_unscoped_objects.create(
        organization=project.organization, project=project, trace_id=trace, started_at=T0 + timedelta(minutes=5)
    )
    with organization_scope(project.organization):
        Step.objects.bulk_create(
            Step(
                organization=project.organization,
                project=project,
                run=run,
                span_id=f"s{n}",
                kind=Step.Kind.LLM if n % 4 else Step.Kind.TOOL,
                model=model_of(n),
                cost=cost_of(n),
                unpriced=cost_of(n) is None,
                started_at=T0 + timedelta(minutes=5 + 10 * n),
            )
            for n in range(16)
        )
    return run


def _models(n):
    return ["mistral-large-2512", "mistral-small-2603", "codestral-2508"][n % 3]


def _costs(n):
    return None if n % 5 == 0 else Decimal(n) / 1000


def _assert_dashboard_matches_the_steps(project):
    with organization_scope(project.organization):
        assert _rollup(project) == _raw_rollup(project)
        for start, end in WINDOWS:
            assert selectors.llm_cost_by_model(project=project, start=start, end=end) == _raw_cost_by_model(
                project, start, end
            ), (start, end)


def test_cost_by_model_counts_ingested_and_resent_calls(tenant):
    """Ingested model calls are in the rollup at once; a span sent again with another
    model or cost moves from the old numbers to the new ones, not added twice."""
    project = tenant.project
    with organization_scope(project.organization):
        ingest(project=project, steps=_llm_step_events("a", tokens=1000), announce=False)
        ingest(project=project, steps=_llm_step_events("b", tokens=5000, model="mystery-model"), announce=False)
        # The same spans again: one with another model, all with other token counts (costs).
        resent = _llm_step_events("a", tokens=3000)
        resent[0].model = "mistral-small-2603"
        ingest(project=project, steps=resent, announce=False)
        board = selectors.dashboard(project=project, start=T0 - timedelta(hours=1), end=T0 + timedelta(hours=3))
    by_model = {row["model"]: (row["calls"], row["cost"]) for row in board["cost_by_model"]}
    assert by_model["mistral-small-2603"][0] == 1
    _assert_dashboard_matches_the_steps(project)


def _llm_step_events(trace, *, tokens, model="mistral-large-2512"):
    return [
        StepEvent(
            trace_id=trace,
            span_id=f"llm{n}",
            kind="llm",
            model=model,
            started_at=T0 + timedelta(minutes=25 * n),
            ended_at=T0 + timedelta(minutes=25 * n, seconds=1),
            input_tokens=tokens,
            output_tokens=10,
        )
        for n in range(6)
    ]


def test_cost_by_model_keeps_unpriced_models_after_priced_ones(tenant):
    project = tenant.project
    _llm_steps(
        project,
        "t",
        model_of=lambda n: "mystery-model" if n < 8 else "mistral-small-2603",
        cost_of=lambda n: None if n < 8 else _costs(n),
    )
    with organization_scope(project.organization):
        rows = selectors.llm_cost_by_model(project=project, start=T0, end=T0 + timedelta(hours=2, minutes=50))
    assert [row["model"] for row in rows] == ["mistral-small-2603", "mystery-model"]
    assert rows[0]["cost"] > 0 and rows[1]["cost"] is None
    _assert_dashboard_matches_the_steps(project)


def test_cost_by_model_follows_a_cost_recompute(tenant):
    """Repricing steps (billing's recompute) updates the rollup in the same transaction."""
    from billing.models import Price
    from billing.recompute import apply_recompute
    from tests.agentops.factories import UserFactory

    project = tenant.project
    _llm_steps(project, "t", model_of=_models, cost_of=_costs)
    price = Price.objects.create(
        kind=Price.Kind.LLM,
        pattern="mistral-large",
        match=Price.Match.PREFIX,
        input_per_million=Decimal("4"),
        output_per_million=Decimal("10"),
        status=Price.Status.DRAFT,
    )
    with organization_scope(project.organization):
        before = selectors.llm_cost_by_model(project=project, start=T0, end=T0 + timedelta(hours=3))
    apply_recompute(
        price=price, starts_at=T0 - timedelta(days=1), ends_at=T0 + timedelta(days=1), actor=UserFactory(is_staff=True)
    )
    with organization_scope(project.organization):
        after = selectors.llm_cost_by_model(project=project, start=T0, end=T0 + timedelta(hours=3))
    large = [(row["calls"], row["cost"]) for row in after if row["model"] == "mistral-large-2512"]
    assert large == [(next(r["calls"] for r in before if r["model"] == "mistral-large-2512"), Decimal(0))]
    _assert_dashboard_matches_the_steps(project)


def test_cost_by_model_forgets_deleted_runs(tenant):
    from agentops.models import Project

    project = tenant.project
    kept = _llm_steps(project, "kept", model_of=_models, cost_of=_costs)
    gone = _llm_steps(project, "gone", model_of=lambda n: "mistral-large-2512", cost_of=lambda n: Decimal("1"))
    with organization_scope(project.organization):
        gone.delete()
        assert selectors.llm_cost_by_model(project=project, start=T0, end=T0 + timedelta(hours=3)) == (
            _raw_cost_by_model(project, T0, T0 + timedelta(hours=3))
        )
    _assert_dashboard_matches_the_steps(project)
    assert kept.pk
    # A whole project deleted takes its rollup with it (no error, nothing left over).
    from runs.models import LlmHourly

    Project.dangerously_unscoped_objects.filter(pk=project.pk).delete()
    assert not LlmHourly.dangerously_unscoped_objects.filter(project_id=project.pk).exists()


def _orm_series(project, start, end):
    """The dashboard's series as the ORM groups it (TruncHour or TruncDay of the start)."""
    from django.db.models import Avg, Count, Q, Sum
    from django.db.models.functions import TruncDay, TruncHour

    bucket = TruncHour("started_at") if (end - start).total_seconds() <= 2 * 86400 else TruncDay("started_at")
    return list(
        Run.objects.filter(project=project, started_at__gte=start, started_at__lt=end)
        .annotate(bucket=bucket)
        .values("bucket")
        .annotate(
            runs=Count("started_at"),
            failed=Count("started_at", filter=Q(status=Run.Status.FAILED)),
            cost=Sum("total_cost"),
            tokens=Sum("output_tokens") + Sum("input_tokens"),
            avg_latency_ms=Avg("latency_ms"),
        )
        .order_by("bucket")
    )


def test_dashboard_series_is_the_runs_grouped_by_hour_or_day(tenant, other_tenant):
    """Bucket by bucket, the same rows (types and representations too) as grouping the
    range's runs by the hour or day they started: ranges starting and ending inside a
    bucket, buckets without runs, runs with no latency, cost or tokens."""
    from tests.billing.factories import make_run

    project = tenant.project
    for n in range(40):
        make_run(
            project,
            started_at=T0 + timedelta(minutes=97 * n),
            status=Run.Status.FAILED if n % 4 == 0 else Run.Status.SUCCEEDED,
            latency_ms=None if n % 6 == 0 else 500 + 37 * n,
            total_cost=(Decimal(n) / 7).quantize(Decimal("0.000000001")),
            input_tokens=10 * n,
            output_tokens=n,
        )
    make_run(other_tenant.project, started_at=T0 + timedelta(minutes=5), status=Run.Status.FAILED)
    ranges = [
        (T0 - timedelta(hours=1), T0 + timedelta(hours=1)),
        (T0 + timedelta(minutes=30), T0 + timedelta(hours=40, minutes=10)),  # hourly, inside buckets
        (T0 + timedelta(minutes=30), T0 + timedelta(days=3, minutes=1)),  # daily
        (T0 - timedelta(days=7), T0 + timedelta(days=7)),
        (T0 + timedelta(hours=20), T0 + timedelta(hours=20)),
    ]
    with organization_scope(project.organization):
        for start, end in ranges:
            series = selectors.dashboard(project=project, start=start, end=end)["series"]
            expected = _orm_series(project, start, end)
            assert series == expected, (start, end)
            assert [{k: (type(v), str(v)) for k, v in row.items()} for row in series] == [
                {k: (type(v), str(v)) for k, v in row.items()} for row in expected
            ]
        assert (
            sum(
                row["runs"]
                for row in selectors.dashboard(project=project, start=ranges[3][0], end=ranges[3][1])["series"]
            )
            == 40
        )
