"""Experiment results and leaderboards as CSV and JSON Lines: what the downloads hold
(parsed back), that they stream in batches, and that spreadsheet formulas are quoted."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync

from agentops.csvexport import original_text
from agentops.downloads import streaming_body
from agentops.scoping import organization_scope
from evals import exports, selectors
from evals.models import ExperimentResult
from tests.evals import test_experiment_pages as pages
from tests.evals.test_experiment_pages import constructed, url

# The page tests' fixtures: an ended executed experiment, a leaderboard of three.
board, ended, setup = pages.board, pages.ended, pages.setup

pytestmark = pytest.mark.django_db


def _body(response) -> str:
    assert response.streaming, "downloads are streamed"
    return b"".join(response.streaming_content).decode()


def test_experiment_results_as_csv(client, tenant, ended):
    client.force_login(tenant.viewer)
    response = client.get(url("experiment-export", experiment_id=ended.pk), {"format": "csv"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert f'filename="experiment-{ended.pk}-results.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(_body(response))))
    with organization_scope(tenant.organization):
        results = {row.item_key: row for row in ExperimentResult.objects.filter(experiment=ended)}
    assert len(rows) == 10
    assert list(rows[0]) == [
        "item_key", "status", "input", "expected", "output", "scores.mentions", "scores.fast",
        "passed.mentions", "passed.fast", "cost", "latency_ms", "tokens", "error", "run_id",
    ]  # fmt: skip
    by_key = {row["item_key"]: row for row in rows}
    assert by_key["q0"]["scores.mentions"] == "1.0" and by_key["q0"]["passed.mentions"] == "true"
    assert by_key["q1"]["scores.mentions"] == "0.0" and by_key["q1"]["passed.mentions"] == "false"
    assert by_key["q1"]["input"] == "question 1" and by_key["q1"]["expected"] == "something else"
    assert by_key["q3"]["output"] == results["q3"].output
    assert by_key["q3"]["run_id"] == str(results["q3"].run_id)
    assert Decimal(by_key["q3"]["cost"]) == results["q3"].cost
    assert by_key["q3"]["status"] == "done" and by_key["q3"]["error"] == ""


def test_experiment_results_as_json_lines(client, tenant, ended):
    client.force_login(tenant.viewer)
    response = client.get(url("experiment-export", experiment_id=ended.pk), {"format": "jsonl"})
    assert response["Content-Type"] == "application/x-ndjson"
    rows = [json.loads(line) for line in _body(response).splitlines()]
    assert [row["item_key"] for row in rows] == [f"q{i}" for i in range(10)]
    first = rows[0]
    assert first["scores"] == {"mentions": 1.0, "fast": 1.0} and first["passed"] == {"mentions": True, "fast": True}
    assert first["input"] == "question 0" and first["output"].startswith("[offline model]")
    assert isinstance(first["cost"], str) and isinstance(first["run_id"], int)


def test_results_are_read_in_batches_so_large_experiments_stream(tenant, setup, django_assert_num_queries):
    _agent, dataset, _evaluators = setup
    experiment = constructed(tenant.project, dataset, name="batched", scores={"a": [0.5] * 10})
    with organization_scope(tenant.organization):
        with django_assert_num_queries(0):  # nothing is read before the body is
            rows = exports.experiment_results_rows(experiment, batch_size=3)
        with django_assert_num_queries(4):  # batches of 3, 3, 3 and the last 1
            keys = [row["item_key"] for row in rows]
    assert keys == [f"q{i}" for i in range(10)]


def test_unknown_export_format_is_404(client, tenant, ended):
    client.force_login(tenant.viewer)
    assert client.get(url("experiment-export", experiment_id=ended.pk), {"format": "xlsx"}).status_code == 404


def test_leaderboard_as_csv_and_json_lines_in_the_page_order(client, tenant, board):
    dataset, low, middle, high = board
    client.force_login(tenant.viewer)
    page = url("leaderboard", dataset_id=dataset.pk)

    body = _body(client.get(page, {"format": "csv", "sort": "cost"}))
    rows = list(csv.DictReader(io.StringIO(body)))
    assert [row["name"] for row in rows] == ["low", "middle", "high"]
    assert "metrics.accuracy.mean" in rows[0] and "metrics.accuracy.ci_low" in rows[0]
    assert float(rows[2]["metrics.accuracy.mean"]) == pytest.approx(0.9)
    stat = high.summary["metrics"]["accuracy"]
    assert float(rows[2]["metrics.accuracy.ci_high"]) == pytest.approx(stat["ci_high"])
    assert Decimal(rows[0]["cost"]) == Decimal("0.010")
    assert rows[1]["branch"] == "feat" and rows[1]["model"] == "large" and rows[1]["agent"] == "bot"

    export = url("leaderboard-export", dataset_id=dataset.pk)
    lines = [json.loads(line) for line in _body(client.get(export, {"format": "jsonl", "branch": "main"})).splitlines()]
    assert [line["experiment_id"] for line in lines] == [high.pk, low.pk]
    assert lines[0]["metrics"]["accuracy"]["mean"] == pytest.approx(0.9)
    assert lines[0]["metrics"]["accuracy"]["n"] == 10 and lines[0]["dataset_version"] == 1
    default = client.get(export)
    assert default["Content-Type"].startswith("text/csv")


def test_csv_cells_that_a_spreadsheet_would_run_are_quoted():
    rows = [{"item_key": "=HYPERLINK(1)", "output": {"answer": "-1"}, "error": "\t+cmd", "score": -0.5, "x": ""}]
    text = "".join(exports.write_csv(rows, ["item_key", "output", "error", "score", "x"]))
    parsed = list(csv.DictReader(io.StringIO(text)))[0]
    assert parsed == {
        "item_key": "'=HYPERLINK(1)",
        "output": '{"answer": "-1"}',
        "error": "'\t+cmd",
        "score": "-0.5",  # a negative number is a number, not a formula
        "x": "",
    }


def test_dotted_columns_reach_metrics_whose_names_have_dots():
    row = {"metrics": {"judge.v2": {"mean": 0.7}, "judge": {"mean": 0.1}}, "scores": {"a.b": 1.0}}
    text = "".join(exports.write_csv([row], ["metrics.judge.v2.mean", "metrics.judge.mean", "scores.a.b", "missing.x"]))
    assert list(csv.reader(io.StringIO(text)))[1] == ["0.7", "0.1", "1.0", ""]


def test_json_lines_write_decimals_and_dates_as_text():
    from datetime import UTC, datetime

    line = next(exports.write_jsonl([{"cost": Decimal("0.10"), "at": datetime(2025, 1, 2, tzinfo=UTC), "é": "ü"}]))
    assert json.loads(line) == {"cost": "0.10", "at": "2025-01-02T00:00:00+00:00", "é": "ü"}


def test_the_body_streams_in_chunks_in_scope_under_asgi_too(tenant, setup):
    """Under ASGI the body is an async iterator reading each chunk in a thread with
    the organization in scope (the view's scope is gone by then)."""
    _agent, dataset, _evaluators = setup
    experiment = constructed(tenant.project, dataset, name="async", scores={"a": [1.0] * 10})
    with organization_scope(tenant.organization):
        names = selectors.metric_names(experiment)
        fieldnames = exports.experiment_results_fieldnames(experiment)
    assert names == ["a"]
    lines = exports.write_csv(exports.experiment_results_rows(experiment, batch_size=4), fieldnames)
    body = streaming_body(lines, organization=tenant.organization, asynchronous=True)

    async def read() -> list[str]:
        return [chunk async for chunk in body]

    chunks = async_to_sync(read)()
    rows = list(csv.DictReader(io.StringIO("".join(chunks))))
    assert [row["item_key"] for row in rows] == [f"q{i}" for i in range(10)]
    assert {row["scores.a"] for row in rows} == {"1.0"}


HOSTILE = {"key": "\t=HYPERLINK(1)", "input": "\r=1+1", "expected": " @SUM(A1)"}


@pytest.fixture
def hostile(tenant):
    """An experiment over one item whose key, input and expected answer a spreadsheet
    would run, costing nothing, on a leaderboard of one."""
    from tests.evals.factories import make_dataset

    dataset = make_dataset(tenant.project, [HOSTILE], name="hostile")
    experiment = constructed(tenant.project, dataset, name="-1+cmd", scores={"a": [0.0]}, cost="0", model="=cmd")
    return dataset, experiment


def _read_back(body: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(body, newline="")))


def _api(tenant, suffix: str) -> str:
    return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/{suffix}"


@pytest.mark.parametrize("where", ["page", "api"])
def test_experiment_results_csv_is_safe_and_reads_back(where, client, tenant, hostile):
    _dataset, experiment = hostile
    client.force_login(tenant.viewer)
    if where == "page":
        response = client.get(url("experiment-export", experiment_id=experiment.pk), {"format": "csv"})
    else:
        response = client.get(_api(tenant, f"experiments/{experiment.pk}/export/"), {"format": "csv"})
    (row,) = _read_back(_body(response))
    assert row["item_key"] == "'" + HOSTILE["key"] and row["input"] == "'" + HOSTILE["input"]
    assert row["expected"] == "'" + HOSTILE["expected"]
    assert {column: original_text(row[column]) for column in ("item_key", "input", "expected")} == {
        "item_key": HOSTILE["key"],
        "input": HOSTILE["input"],
        "expected": HOSTILE["expected"],
    }
    assert row["cost"] == "0.000000000" and row["scores.a"] == "0.0" and row["error"] == ""


@pytest.mark.parametrize("where", ["page", "api"])
def test_leaderboard_csv_is_safe_and_reads_back(where, client, tenant, hostile):
    dataset, experiment = hostile
    client.force_login(tenant.viewer)
    if where == "page":
        response = client.get(url("leaderboard-export", dataset_id=dataset.pk), {"format": "csv"})
    else:
        response = client.get(_api(tenant, f"datasets/{dataset.pk}/leaderboard/"), {"format": "csv"})
    (row,) = _read_back(_body(response))
    assert row["name"] == "'-1+cmd" and original_text(row["name"]) == "-1+cmd"
    assert row["model"] == "'=cmd" and row["branch"] == "" and row["cost"] == "0.000000000"
    assert row["experiment_id"] == str(experiment.pk)


def test_json_lines_write_zero_costs_plainly(client, tenant, hostile):
    _dataset, experiment = hostile
    client.force_login(tenant.viewer)
    response = client.get(url("experiment-export", experiment_id=experiment.pk), {"format": "jsonl"})
    (line,) = [json.loads(line) for line in _body(response).splitlines()]
    assert line["cost"] == "0.000000000" and line["item_key"] == HOSTILE["key"]
