"""The rule evaluators (every kind passes and fails), configuration checks, JSON paths,
human scales, and what an evaluator sees of a run (``Subject.from_run``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from agentops.errors import InvalidRequest
from agentops.scoping import organization_scope
from evals.services.scoring import (
    EXAMPLES,
    Outcome,
    StepView,
    Subject,
    ToolCallView,
    evaluate,
    normalise_human,
    parse_path,
    passed,
    resolve_path,
    spec_of,
    validate_config,
)
from runs.events import RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.models import Run
from tests.evals.helpers import make_evaluator

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def subject(output=None, expected=None, **fields) -> Subject:
    values = {"input": "question", "metadata": {}, "cost": None, "latency_ms": None, "tokens": 0, **fields}
    return Subject(output=output, expected=expected, **values)


def score(kind: str, config: dict, subject: Subject, threshold: float = 0.5) -> Outcome:
    spec = {"id": None, "name": "metric", "kind": kind, "config": validate_config(kind, config), "threshold": threshold}
    return evaluate(spec, subject, organization=None)


# --- JSON paths ----------------------------------------------------------------------------------


def test_paths_read_keys_and_indexes():
    assert parse_path("a.b[0].c") == ["a", "b", 0, "c"]
    assert parse_path("[1]") == [1] and parse_path("") == []
    document = {"a": {"b": [{"c": 7}, {"c": 8}]}}
    assert resolve_path(document, parse_path("a.b[-1].c")) == 8
    assert resolve_path(document, parse_path("a.b.0.c")) == 7  # a number after a dot indexes a list
    assert resolve_path('{"a": {"b": [1]}}', parse_path("a.b[0]")) == 1  # JSON text is parsed


@pytest.mark.parametrize("path", ["a..b", "a[x]", "a[0", ".a", "a."])
def test_malformed_paths_are_refused(path):
    with pytest.raises(ValueError, match="is not a path"):
        parse_path(path)


# --- Every rule: a pass and a fail ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "config", "good", "bad"),
    [
        ("exact_match", {}, subject(" Paris ", "Paris"), subject("Lyon", "Paris")),
        ("exact_match", {"case_sensitive": False}, subject("PARIS", "paris"), subject("PARIS!", "paris")),
        ("exact_match", {"field": "answer"}, subject({"answer": 42}, {"answer": 42}), subject({"answer": 41}, 42)),
        ("exact_match", {"expected": {"a": 1}}, subject('{"a": 1.0}'), subject('{"a": 2}')),
        ("contains", {"value": ["refund", "order"]}, subject("Your order refund is done"), subject("order only")),
        ("contains", {"case_sensitive": False}, subject("It is PARIS.", "paris"), subject("It is Lyon.", "paris")),
        ("regex", {"pattern": r"^ORD-\d{3}$", "flags": "m"}, subject("x\nORD-123\n"), subject("ORD-12")),
        ("json_valid", {}, subject('{"ok": true}'), subject("{ok: true}")),
        ("json_valid", {}, subject({"ok": True}), subject(None)),
        (
            "json_schema",
            {"schema": {"type": "object", "required": ["answer"]}},
            subject({"answer": "x"}),
            subject({"other": 1}),
        ),
        (
            "json_field",
            {"path": "order.status"},
            subject({"order": {"status": "refunded"}}, {"order": {"status": "refunded"}}),
            subject({"order": {"status": "open"}}, {"order": {"status": "refunded"}}),
        ),
        ("json_field", {"path": "items[1]", "value": "b"}, subject('{"items": ["a", "b"]}'), subject({"items": ["a"]})),
        ("numeric", {"tolerance": 0.5}, subject("10.4", 10), subject("10.6", 10)),
        (
            "numeric",
            {"tolerance": 0.1, "relative": True, "field": "total"},
            subject({"total": 105}, {"total": 100}),
            subject({"total": 111}, {"total": 100}),
        ),
        ("cost_limit", {"max_cost": 0.01}, subject(cost=Decimal("0.01")), subject(cost=Decimal("0.010000001"))),
        ("latency_limit", {"max_ms": 1000}, subject(latency_ms=1000), subject(latency_ms=1001)),
    ],
)
def test_rule_passes_and_fails(kind, config, good, bad):
    passing, failing = score(kind, config, good), score(kind, config, bad)
    assert (passing.value, passing.error) == (1.0, ""), passing
    assert (failing.value, failing.error) == (0.0, ""), failing
    assert failing.reasoning


def test_failures_say_what_was_wrong():
    assert score("exact_match", {}, subject("Lyon", "Paris")).reasoning == 'got "Lyon", expected "Paris"'
    missing = score("contains", {"value": ["refund", "sorry"]}, subject("a refund"))
    assert missing.reasoning == 'missing: "sorry"' and missing.details == {"missing": ["sorry"]}
    schema = score("json_schema", {"schema": {"properties": {"n": {"type": "integer"}}}}, subject({"n": "x"}))
    assert schema.reasoning == "n: 'x' is not of type 'integer'"
    assert score("numeric", {}, subject("about ten", 10)).reasoning == '"about ten" is not a number'
    assert (
        score("json_field", {"path": "a.b", "value": 1}, subject({"a": {}})).reasoning == "the output has no field a.b"
    )


def test_comparisons_with_no_expected_output_cannot_score():
    for kind in ("exact_match", "contains", "numeric"):
        outcome = score(kind, {}, subject("anything"))
        assert outcome.value is None and "nothing to compare with" in outcome.error
    outcome = score("json_field", {"path": "a"}, subject({"a": 1}, expected={"b": 2}))
    assert outcome.value is None and "the expected output has no field a" in outcome.error


def test_unknown_cost_or_latency_cannot_score():
    assert score("cost_limit", {"max_cost": 1}, subject()).error == "the run's cost is not known"
    assert score("latency_limit", {"max_ms": 1}, subject()).error == "the run's latency is not known"


def test_catastrophic_patterns_are_refused_when_saved():
    with pytest.raises(InvalidRequest, match="catastrophic backtracking"):
        validate_config("regex", {"pattern": r"^(a+)+$"})


def test_human_evaluators_are_not_run_by_evaluate():
    outcome = score("human", {"scale": "1-5"}, subject("x"))
    assert outcome == Outcome(value=None, error="scored by people")


# --- Trajectory ----------------------------------------------------------------------------------


def trajectory(*calls: tuple[str, dict], steps: int | None = None) -> Subject:
    tool_calls = [ToolCallView(name=name, arguments=arguments, result="ok", error="") for name, arguments in calls]
    step_views = [
        StepView(kind=kind, name=name, status="ok", model="", input=None, output=None, error="", latency_ms=5)
        for kind, name in [("agent", "agent")] + [("llm", "chat")] * (steps or 0)
    ]
    return subject("done", steps=step_views if steps is not None else [], tool_calls=tool_calls)


def test_trajectory_passes_every_check():
    config = {
        "tool": "lookup_order",
        "arguments": {"order_id": r"ORD-\d+", "options.refund": True},
        "max_steps": 3,
        "forbidden_tools": ["delete_order"],
        "order": ["lookup_order", "issue_refund"],
    }
    run = trajectory(
        ("lookup_order", {"order_id": "nope"}),
        ("lookup_order", {"order_id": "ORD-12", "options": {"refund": True}}),
        ("issue_refund", {}),
    )
    outcome = score("trajectory", config, run)
    assert outcome.value == 1.0 and outcome.reasoning == "all 4 checks passed"
    assert [check["check"] for check in outcome.details["checks"]] == ["tool", "max_steps", "forbidden_tools", "order"]


def test_trajectory_score_is_the_share_of_checks_that_pass():
    config = {"tool": "lookup_order", "arguments": {"order_id": "ORD-1"}, "max_steps": 2, "forbidden_tools": ["rm"]}
    run = trajectory(("lookup_order", {"order_id": "ORD-2"}), ("rm", {}), steps=2)
    outcome = score("trajectory", config, run)
    # The agent span is not counted: 2 LLM steps are within the budget.
    assert outcome.value == pytest.approx(1 / 3)
    assert outcome.details["failed"] == ["tool", "forbidden_tools"]
    assert "never with matching order_id" in outcome.reasoning and "called rm" in outcome.reasoning


def test_trajectory_order_is_a_subsequence_and_missing_tools_fail():
    config = {"order": ["search", "answer"], "tool": "search"}
    assert score("trajectory", config, trajectory(("search", {}), ("fetch", {}), ("answer", {}))).value == 1.0
    outcome = score("trajectory", config, trajectory(("answer", {}), ("search", {})))
    assert outcome.value == 0.5 and "calls were: answer → search" in outcome.reasoning
    assert score("trajectory", {"tool": "search"}, trajectory()).reasoning == "failed: tool: search was never called"
    # With no steps recorded, max_steps counts the tool calls.
    assert score("trajectory", {"max_steps": 1}, trajectory(("a", {}), ("b", {}))).value == 0.0


# --- Configuration checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "config", "message"),
    [
        ("exact_match", {"feild": "answer"}, "unknown setting 'feild' for exact_match evaluators"),
        ("exact_match", {"case_sensitive": "no"}, "case_sensitive must be true or false"),
        ("exact_match", {"field": "a..b"}, "field: 'a..b' is not a path"),
        ("contains", {"value": []}, "value must be a text or a list of texts"),
        ("regex", {}, "regex evaluators need pattern"),
        ("regex", {"pattern": "("}, "invalid regular expression"),
        ("regex", {"pattern": "a", "flags": "g"}, 'flags are letters among "imsx"'),
        ("json_valid", {"strict": True}, "they take no settings"),
        ("json_schema", {}, 'need "schema"'),
        ("json_schema", {"schema": {"type": "banana"}}, "the schema is not valid"),
        ("json_field", {}, "json_field evaluators need path"),
        ("numeric", {"tolerance": -1}, "tolerance must be at least 0"),
        ("numeric", {"expected": "ten"}, "expected must be a number"),
        ("cost_limit", {"max_cost": "lots"}, "need max_cost"),
        ("latency_limit", {"max_ms": 1.5}, "max_ms must be a whole number"),
        ("trajectory", {}, "need at least one check"),
        ("trajectory", {"arguments": {"a": 1}}, "name the tool too"),
        ("trajectory", {"tool": "x", "arguments": {"a": "(a+)+$"}}, "catastrophic"),
        ("trajectory", {"order": "search"}, "order must be a list of tool names"),
        ("llm_judge", {}, "llm_judge evaluators need rubric"),
        ("llm_judge", {"rubric": "x", "max_trajectory_chars": 10}, "max_trajectory_chars must be at least 1000"),
        ("webhook", {}, "webhook evaluators need url"),
        ("webhook", {"url": "ftp://x"}, "URL refused"),
        ("webhook", {"url": "https://x.example.com", "timeout_seconds": 90}, "timeout_seconds must be at most 60"),
        ("human", {"scale": "1-10"}, "scale must be one of 0-1, pass-fail, 1-5"),
        ("sentiment", {}, "unknown evaluator kind 'sentiment'"),
    ],
)
def test_bad_configurations_say_what_is_wrong(kind, config, message):
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(").replace("+", r"\+").replace("$", r"\$")):
        validate_config(kind, config)


def test_configurations_get_their_defaults_and_every_example_is_valid():
    assert validate_config("exact_match", {}) == {"case_sensitive": True, "strip": True}
    assert validate_config("llm_judge", {"rubric": "Be right."}) == {
        "model": "mistral-small-latest",
        "rubric": "Be right.",
        "include_trajectory": True,
        "max_trajectory_chars": 20000,
    }
    assert validate_config("webhook", {"url": "https://hooks.example.com/x"})["timeout_seconds"] == 10
    assert validate_config("human", {}) == {"scale": "0-1"}
    for kind, example in EXAMPLES.items():
        validate_config(kind, example)


def test_webhook_url_is_checked_against_private_addresses(settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    with pytest.raises(InvalidRequest, match="private or reserved"):
        validate_config("webhook", {"url": "http://169.254.169.254/latest/meta-data"})


# --- Human scales, thresholds, specs --------------------------------------------------------------


def test_human_scores_are_normalised_to_0_1():
    assert normalise_human({"scale": "1-5"}, 1) == 0.0 and normalise_human({"scale": "1-5"}, "5") == 1.0
    assert normalise_human({"scale": "1-5"}, 4) == 0.75
    assert (
        normalise_human({"scale": "pass-fail"}, "pass") == 1.0 and normalise_human({"scale": "pass-fail"}, False) == 0
    )
    assert normalise_human({}, 0.3) == 0.3
    for config, raw in [({"scale": "1-5"}, 6), ({"scale": "1-5"}, 2.5), ({"scale": "pass-fail"}, "maybe"), ({}, 1.2)]:
        with pytest.raises(InvalidRequest):
            normalise_human(config, raw)


def test_passing_is_at_or_above_the_threshold(tenant):
    evaluator = make_evaluator(tenant.project, "correctness", "exact_match", {"strip": True}, threshold=0.8)
    spec = spec_of(evaluator)
    assert spec == {
        "id": evaluator.pk,
        "name": "correctness",
        "kind": "exact_match",
        "config": {"strip": True},
        "threshold": 0.8,
    }
    assert passed(spec, 0.8) is True and passed(spec, 0.79) is False and passed(spec, None) is None


# --- What an evaluator sees of a run ---------------------------------------------------------------


def make_run(tenant) -> Run:
    trace = "trace-eval"
    with organization_scope(tenant.organization):
        ingest(
            project=tenant.project,
            runs=[
                RunEvent(
                    trace,
                    {"input": "Refund ORD-1", "output": "Refunded.", "status": "succeeded", "metadata": {"team": "a"}},
                )
            ],
            steps=[
                StepEvent(
                    trace,
                    "s2",
                    kind="tool",
                    name="lookup_order",
                    started_at=T0 + timedelta(seconds=2),
                    ended_at=T0 + timedelta(seconds=2, milliseconds=40),
                    input={"order_id": "ORD-1"},
                ),
                StepEvent(
                    trace,
                    "s1",
                    kind="llm",
                    name="chat",
                    model="mistral-small-latest",
                    started_at=T0,
                    input=[{"role": "user", "content": "Refund ORD-1"}],
                    output="calling lookup_order",
                ),
            ],
            tool_calls=[
                ToolCallEvent(trace, "c2", "issue_refund", started_at=T0 + timedelta(seconds=3), arguments={"id": 1}),
                ToolCallEvent(
                    trace,
                    "c1",
                    "lookup_order",
                    started_at=T0 + timedelta(seconds=2),
                    arguments={"order_id": "ORD-1"},
                    result={"status": "paid"},
                ),
            ],
            announce=False,
        )
        return Run.objects.get(project=tenant.project, trace_id=trace)


def test_subject_from_run_loads_the_trajectory_in_order_in_two_queries(tenant, django_assert_num_queries):
    run = make_run(tenant)
    with organization_scope(tenant.organization), django_assert_num_queries(2):
        seen = Subject.from_run(run)
    assert [(step.kind, step.name) for step in seen.steps] == [("llm", "chat"), ("tool", "lookup_order")]
    assert seen.steps[1].latency_ms == 40 and seen.steps[0].model == "mistral-small-latest"
    assert [call.name for call in seen.tool_calls] == ["lookup_order", "issue_refund"]
    assert seen.tool_calls[0].result == {"status": "paid"}
    assert (seen.input, seen.output, seen.expected, seen.metadata) == ("Refund ORD-1", "Refunded.", None, {"team": "a"})
    assert seen.run_id == run.pk and seen.run_status == "succeeded"


def test_subject_from_run_takes_input_and_expected_from_the_item(tenant):
    run = make_run(tenant)
    item = {"input": {"q": "refund"}, "expected": "Refunded.", "metadata": {"split": "test"}}
    with organization_scope(tenant.organization):
        seen = Subject.from_run(run, item=item)
    assert (seen.input, seen.expected, seen.metadata) == ({"q": "refund"}, "Refunded.", {"split": "test"})
    assert score("exact_match", {}, seen).value == 1.0


def test_reported_subject_reads_tool_calls_from_tool_steps():
    seen = Subject.reported(
        item={"input": "x", "expected": "y"},
        output="y",
        cost="0.002",
        steps=[{"kind": "llm", "name": "chat"}, {"kind": "tool", "name": "search", "input": {"q": "x"}}],
    )
    assert seen.cost == Decimal("0.002") and seen.expected == "y"
    assert seen.tool_calls == [ToolCallView(name="search", arguments={"q": "x"}, result=None, error="")]
    assert score("trajectory", {"tool": "search", "arguments": {"q": "x"}}, seen).value == 1.0


def test_a_pattern_that_runs_out_of_time_gives_no_score():
    # Saving refuses this pattern now; one saved before the check still runs. It needs
    # about 2^5000 steps on this output (each digit doubles the ways to try), so the
    # budget trips on any machine.
    config = {"pattern": r"^(\d|[0-9])+$", "flags": ""}
    spec = {"id": None, "name": "metric", "kind": "regex", "config": config, "threshold": 0.5}
    outcome = evaluate(spec, subject("1" * 5000 + "!"), organization=None)
    assert outcome.value is None and outcome.error == "the pattern took too long on this output"
