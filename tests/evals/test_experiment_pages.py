"""The experiment pages: the list and starting one, one experiment (progress, results,
live fragments), cancelling, a dataset's leaderboard (sorting, filtering, charts), two
experiments compared (significance only where the intervals say so), roles and tenant
isolation."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from agentops.scoping import organization_scope
from billing.budgets import budget_create, utc_today
from billing.models import UsageDaily
from evals import selectors
from evals.models import DatasetVersion, Experiment, ExperimentResult
from evals.services.experiments import experiment_advance, experiment_start, score_result, summarize
from runs.execution import run_execute
from runs.services.agents import agent_create
from tests.evals.factories import drive, make_dataset, make_evaluator

ORG, PROJECT = "acme", "agent"


def url(name: str, **kwargs) -> str:
    return reverse(f"evals:{name}", kwargs={"org_slug": ORG, "project_slug": PROJECT, **kwargs})


def _items(n: int) -> list[dict]:
    # The offline model answers "[offline model] You said: <input>": even items expect
    # words the answer holds, odd items words it does not.
    return [
        {"key": f"q{i}", "input": f"question {i}", "expected": f"question {i}" if i % 2 == 0 else "something else"}
        for i in range(n)
    ]


@pytest.fixture
def setup(tenant):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
    dataset = make_dataset(tenant.project, _items(10))
    contains = make_evaluator(tenant.project, "mentions", "contains")
    fast = make_evaluator(tenant.project, "fast", "latency_limit", {"max_ms": 60_000})
    return agent, dataset, [contains, fast]


def _start(tenant, setup, **kwargs) -> Experiment:
    agent, dataset, evaluators = setup
    fields = {"agent": agent, "evaluators": evaluators, "concurrency": 3, **kwargs}
    with organization_scope(tenant.organization):
        return experiment_start(project=tenant.project, actor=tenant.member, dataset=dataset, **fields)


@pytest.fixture
def ended(tenant, setup) -> Experiment:
    """An executed experiment run to its end in this process: mentions 0.5, fast 1.0."""
    experiment = _start(tenant, setup, branch="main")
    with organization_scope(tenant.organization):
        return drive(experiment)


def constructed(
    project,
    dataset,
    *,
    name: str,
    scores: dict[str, list[float | None]],
    branch: str = "",
    agent: str = "bot",
    model: str = "offline",
    cost: str = "0.001",
    created_at=None,
    status: str = Experiment.Status.SUCCEEDED,
) -> Experiment:
    """An ended experiment written directly: one result per item with ``scores`` (per
    metric, a value per item in item order) and the summary the service would compute."""
    from evals.models import DatasetItem

    specs = [{"id": None, "name": metric, "kind": "contains", "config": {}, "threshold": 0.5} for metric in scores]
    with organization_scope(project.organization):
        items = list(DatasetItem.objects.filter(dataset=dataset).order_by("id"))
        now = created_at or timezone.now()
        experiment = Experiment.objects.create(
            organization=project.organization,
            project=project,
            dataset=dataset,
            dataset_version=DatasetVersion.objects.get(dataset=dataset, number=1),
            name=name,
            status=status,
            agent_name=agent,
            agent_version_label="1",
            model=model,
            evaluators=specs,
            branch=branch,
            item_count=len(items),
            completed_count=len(items),
            created_at=now,
            started_at=now,
            ended_at=now,
        )
        results = [
            ExperimentResult(
                organization=project.organization,
                project=project,
                experiment=experiment,
                item=item,
                item_key=item.key,
                status=ExperimentResult.Status.DONE,
                output=f"{name} answer {index}",
                scores={metric: values[index] for metric, values in scores.items()},
                cost=Decimal(cost),
                latency_ms=100 + index,
            )
            for index, item in enumerate(items)
        ]
        ExperimentResult.objects.bulk_create(results)
        rows = [
            {"status": result.status, "scores": result.scores, "latency_ms": result.latency_ms, "cost": result.cost}
            for result in results
        ]
        experiment.summary = summarize(specs, rows, seed=experiment.pk)
        experiment.total_cost = Decimal(cost) * len(items)
        experiment.save()
    return experiment


# -- the list and starting one -----------------------------------------------------------------


def test_experiments_list_shows_each_experiment_with_its_metrics_and_filters(client, tenant, setup, ended):
    _agent, dataset, _evaluators = setup
    other = constructed(tenant.project, dataset, name="feature run", scores={"mentions": [1.0] * 10}, branch="feat")
    client.force_login(tenant.viewer)

    response = client.get(url("experiments"))
    html = response.content.decode()
    assert response.status_code == 200
    assert f'id="experiment-row-{ended.pk}"' in html and f'id="experiment-row-{other.pk}"' in html
    row = html.split(f'id="experiment-row-{ended.pk}"')[1].split("</tr>")[0]
    assert "Succeeded" in row and "echo" in row and "v1" in row and "10 / 10" in row
    assert "mentions <strong>0.50</strong>" in row and "fast <strong>1.00</strong>" in row
    assert "New experiment" not in html, "viewers are not offered the form"

    only_main = client.get(url("experiments"), {"branch": "main"}).content.decode()
    assert f"experiment-row-{ended.pk}" in only_main and f"experiment-row-{other.pk}" not in only_main
    failed = client.get(url("experiments"), {"status": "failed", "dataset": dataset.pk}).content.decode()
    assert "No experiments match" in failed


def test_member_starts_an_experiment_from_the_form(client, tenant, setup):
    agent, dataset, evaluators = setup
    client.force_login(tenant.member)
    page = client.get(url("experiments")).content.decode()
    assert "New experiment" in page and 'name="evaluators"' in page

    response = client.post(
        url("experiments"),
        {
            "dataset": dataset.pk,
            "agent": agent.pk,
            "evaluators": [evaluators[0].pk],
            "concurrency": 2,
            "name": "",
            "branch": "main",
        },
    )
    with organization_scope(tenant.organization):
        experiment = Experiment.objects.get()
    assert response.status_code == 302
    assert response["Location"] == url("experiment", experiment_id=experiment.pk)
    assert experiment.concurrency == 2 and experiment.branch == "main" and experiment.item_count == 10
    assert [spec["name"] for spec in experiment.evaluators] == ["mentions"]
    assert experiment.created_by == tenant.member


def test_the_start_form_offers_only_runnable_evaluators(client, tenant, setup):
    archived = make_evaluator(tenant.project, "old", "contains")
    archived.archived = True
    archived.save()
    make_evaluator(tenant.project, "people", "human")
    client.force_login(tenant.member)
    html = client.get(url("experiments")).content.decode()
    form = html.split('id="new-experiment-form"')[1].split("</form>")[0]
    assert "mentions" in form and "fast" in form
    assert ">old<" not in form and ">people<" not in form


def test_start_form_shows_the_service_error(client, tenant, setup):
    agent, dataset, evaluators = setup
    client.force_login(tenant.member)
    response = client.post(
        url("experiments"),
        {
            "dataset": dataset.pk,
            "dataset_version": 9,
            "agent": agent.pk,
            "evaluators": [evaluators[0].pk],
            "concurrency": 4,
        },
    )
    assert response.status_code == 400
    assert "has no version 9" in response.content.decode()
    with organization_scope(tenant.organization):
        assert Experiment.objects.count() == 0


def test_start_form_shows_a_spent_budget_as_402(client, tenant, setup):
    agent, dataset, evaluators = setup
    with organization_scope(tenant.organization):
        budget_create(organization=tenant.organization, actor=tenant.owner, name="cap", amount="1", hard_limit=True)
        UsageDaily.dangerously_unscoped_objects.create(
            organization=tenant.organization, project=tenant.project, day=utc_today(), model="m", cost=Decimal("1")
        )
    client.force_login(tenant.member)
    response = client.post(
        url("experiments"),
        {"dataset": dataset.pk, "agent": agent.pk, "evaluators": [evaluators[0].pk], "concurrency": 4},
    )
    assert response.status_code == 402
    assert "form-errors" in response.content.decode() and "budget" in response.content.decode().lower()


def test_viewer_cannot_start_or_cancel_an_experiment(client, tenant, setup):
    agent, dataset, evaluators = setup
    running = _start(tenant, setup)
    client.force_login(tenant.viewer)
    started = client.post(
        url("experiments"),
        {"dataset": dataset.pk, "agent": agent.pk, "evaluators": [evaluators[0].pk], "concurrency": 4},
    )
    cancelled = client.post(url("experiment-cancel", experiment_id=running.pk))
    assert started.status_code == 403 and cancelled.status_code == 403
    assert "start and cancel experiments" in cancelled.content.decode()
    page = client.get(url("experiment", experiment_id=running.pk)).content.decode()
    assert 'id="experiment-cancel"' not in page
    with organization_scope(tenant.organization):
        assert Experiment.objects.count() == 1
        running.refresh_from_db()
    assert running.cancel_requested is False


def test_member_cancels_a_running_experiment(client, tenant, setup):
    experiment = _start(tenant, setup)
    with organization_scope(tenant.organization):
        experiment_advance(experiment_id=experiment.pk)
    client.force_login(tenant.member)
    assert 'id="experiment-cancel"' in client.get(url("experiment", experiment_id=experiment.pk)).content.decode()

    response = client.post(url("experiment-cancel", experiment_id=experiment.pk), follow=True)
    with organization_scope(tenant.organization):
        experiment.refresh_from_db()
    assert experiment.cancel_requested
    assert "Cancelled" in response.content.decode()


# -- one experiment ------------------------------------------------------------------------------


def test_an_ended_experiment_page_shows_intervals_totals_and_every_item(client, tenant, ended):
    client.force_login(tenant.viewer)
    response = client.get(url("experiment", experiment_id=ended.pk))
    html = response.content.decode()
    assert response.status_code == 200
    mentions = ended.summary["metrics"]["mentions"]
    interval = f'{mentions["mean"]:.2f} <span class="muted">[{mentions["ci_low"]:.2f}, {mentions["ci_high"]:.2f}]'
    assert interval in html
    assert f'id="experiment-{ended.pk}-progress"' in html and "hx-swap-oob" not in html
    assert "10</strong> of 10 items done" in html
    assert "Pass rate</dt><dd>50.0%" in html and "per item" in html and "p95" in html
    with organization_scope(tenant.organization):
        results = list(ExperimentResult.objects.filter(experiment=ended).order_by("id"))
    for result in results:
        assert f'id="experiment-{ended.pk}-result-{result.pk}"' in html
        run_url = reverse("runs:detail", kwargs={"org_slug": ORG, "project_slug": PROJECT, "run_id": result.run_id})
        assert f'href="{run_url}"' in html
    # Even items mention the question and pass; odd ones fail, styled by the threshold.
    passing = html.split(f'id="experiment-{ended.pk}-result-{results[0].pk}"')[1].split('role="row"')[0]
    failing = html.split(f'id="experiment-{ended.pk}-result-{results[1].pk}"')[1].split('role="row"')[0]
    assert "score-pass" in passing and "1.00" in passing
    assert 'score score-fail" title="failed (threshold 0.5)">0.00' in failing
    assert "question 1" in failing and "[offline model]" in failing
    assert 'id="experiment-cancel"' not in html
    # The live progress still swaps the cancel slot out of band when the socket opens:
    # without its (empty) target htmx logs oobErrorNoTarget on every ended experiment.
    assert f'<div id="experiment-{ended.pk}-cancel">' in html
    assert "?format=csv" in html and "?format=jsonl" in html
    assert url("leaderboard", dataset_id=ended.dataset_id) in html


def test_a_running_experiment_page_shows_pending_rows_and_means_so_far(client, tenant, setup):
    experiment = _start(tenant, setup, concurrency=2)
    with organization_scope(tenant.organization):
        experiment_advance(experiment_id=experiment.pk)
        started = list(ExperimentResult.objects.filter(experiment=experiment, status="running"))
        for result in started:
            run_execute(run_id=result.run_id)  # the run's end marks its result "scoring"
            score_result(result_id=result.pk)
    client.force_login(tenant.member)
    html = client.get(url("experiment", experiment_id=experiment.pk)).content.decode()
    assert "Running" in html
    assert re.search(r"<strong[^>]*>(\d+)</strong> of 10 items done", html).group(1) == str(
        Experiment.dangerously_unscoped_objects.get(pk=experiment.pk).completed_count
    )
    assert html.count("is-pending") >= 6, "items not started yet are rows too, shown as pending"
    assert 'title="mean so far"' in html and "Intervals come when every item is scored" in html
    assert 'id="experiment-cancel"' in html
    # The page fetches itself again when its socket opens.
    assert f'hx-get="{url("experiment-live", experiment_id=experiment.pk)}?page=1"' in html
    assert 'hx-trigger="htmx:wsOpen from:body"' in html


def test_fragments_rendered_for_live_updates_swap_by_id(tenant, ended):
    with organization_scope(tenant.organization):
        experiment = selectors.experiment_detail(project=tenant.project, experiment_id=ended.pk)
        result = selectors.result_list(experiment=experiment).first()
        context = {
            "organization": tenant.organization,
            "project": tenant.project,
            "experiment": experiment,
            "metric_names": selectors.metric_names(experiment),
            "means": selectors.running_means(experiment),
            "oob": True,
        }
        progress = render_to_string("evals/_experiment_progress.html", context).strip()
        row = render_to_string("evals/_experiment_result_row.html", {**context, "result": result}).strip()
    assert re.search(rf'<section [^>]*id="experiment-{ended.pk}-progress"[^>]*hx-swap-oob="true"', progress)
    assert re.search(rf'<div role="row" [^>]*id="experiment-{ended.pk}-result-{result.pk}"[^>]*hx-swap-oob="true"', row)
    # An ended experiment also takes its Cancel button away on open pages.
    assert f'<div id="experiment-{ended.pk}-cancel" hx-swap-oob="true" hidden></div>' in progress
    # No table parts at the top level: the ws extension parses both in one message.
    assert "<tr" not in progress + row and "<tbody" not in progress + row


def test_live_announcements_render_the_progress_and_the_row(tenant, setup, monkeypatch):
    """evals.live renders these templates after each scored item, each for the pages
    that show it: the progress block for the experiment's page, the row for the pages
    showing that row, both swapped out of band."""
    from agentops import live as agentops_live
    from evals import live

    sent = []
    monkeypatch.setattr(agentops_live, "listening_topics", lambda *, project, topics: set(topics))
    monkeypatch.setattr(agentops_live, "announce", lambda **kwargs: sent.append(kwargs))
    experiment = _start(tenant, setup, concurrency=1)
    with organization_scope(tenant.organization):
        experiment_advance(experiment_id=experiment.pk)
        result = ExperimentResult.objects.get(experiment=experiment, status="running")
        run_execute(run_id=result.run_id)
        score_result(result_id=result.pk)
        sent.clear()
        live.announce_result(experiment_id=experiment.pk, result_id=result.pk)
    progress, row = sent
    assert progress["topic"] == f"experiment:{experiment.pk}" and row["topic"] == f"experiment-result:{result.pk}"
    assert f'id="experiment-{experiment.pk}-progress"' in progress["html"]
    assert f'id="experiment-{experiment.pk}-result-{result.pk}"' in row["html"]
    assert progress["html"].count('hx-swap-oob="true"') == 1 and row["html"].count('hx-swap-oob="true"') == 1
    assert 'data-status="done"' in row["html"] and "1</strong> of 10 items" in progress["html"]


def test_the_live_fragment_re_renders_progress_and_the_page_of_rows(client, tenant, ended):
    client.force_login(tenant.viewer)
    html = client.get(url("experiment-live", experiment_id=ended.pk), {"page": 1}).content.decode()
    assert html.count('hx-swap-oob="true"') == 1 + 10 + 1  # progress, rows, the Cancel button's place
    assert "<html" not in html


def test_the_experiment_page_does_no_query_per_result(client, tenant, setup, django_assert_max_num_queries):
    _agent, dataset, _evaluators = setup
    big = make_dataset(tenant.project, [{"key": f"k{i}", "input": f"input {i}"} for i in range(500)], name="big")
    experiment = constructed(
        tenant.project, big, name="big run", scores={"a": [i % 2 for i in range(500)], "b": [1.0] * 500}
    )
    client.force_login(tenant.viewer)
    with django_assert_max_num_queries(13):
        response = client.get(url("experiment", experiment_id=experiment.pk))
    assert response.status_code == 200
    assert response.content.decode().count('role="row" class="result-row') == 100
    with django_assert_max_num_queries(13):
        last = client.get(url("experiment", experiment_id=experiment.pk), {"page": 5})
    assert "Items 401–500 of 500" in last.content.decode()
    with django_assert_max_num_queries(10):
        client.get(url("experiment-live", experiment_id=experiment.pk))


# -- leaderboards -------------------------------------------------------------------------------


@pytest.fixture
def board(tenant, setup):
    """Three ended experiments on the dataset: better and dearer as they go."""
    _agent, dataset, _evaluators = setup
    start = timezone.now() - timedelta(days=3)
    low = constructed(
        tenant.project,
        dataset,
        name="low",
        scores={"accuracy": [0.0] * 8 + [1.0] * 2},
        branch="main",
        cost="0.001",
        created_at=start,
        agent="bot",
        model="small",
    )
    middle = constructed(
        tenant.project,
        dataset,
        name="middle",
        scores={"accuracy": [0.0] * 5 + [1.0] * 5},
        branch="feat",
        cost="0.002",
        created_at=start + timedelta(days=1),
        agent="bot",
        model="large",
    )
    high = constructed(
        tenant.project,
        dataset,
        name="high",
        scores={"accuracy": [0.0] * 1 + [1.0] * 9},
        branch="main",
        cost="0.003",
        created_at=start + timedelta(days=2),
        agent="other",
        model="large",
    )
    return dataset, low, middle, high


def _order(html: str) -> list[str]:
    return re.findall(r'id="leaderboard-row-(\d+)"', html)


def test_leaderboard_sorts_by_a_metric_cost_and_date(client, tenant, board):
    dataset, low, middle, high = board
    client.force_login(tenant.viewer)
    page = url("leaderboard", dataset_id=dataset.pk)

    by_date = client.get(page).content.decode()
    assert _order(by_date) == [str(high.pk), str(middle.pk), str(low.pk)]
    assert _order(client.get(page, {"sort": "accuracy"}).content.decode()) == [
        str(high.pk),
        str(middle.pk),
        str(low.pk),
    ]
    assert _order(client.get(page, {"sort": "cost"}).content.decode()) == [str(low.pk), str(middle.pk), str(high.pk)]
    assert _order(client.get(page, {"sort": "name"}).content.decode()) == [str(high.pk), str(low.pk), str(middle.pk)]
    stat = high.summary["metrics"]["accuracy"]
    interval = f"[{stat['ci_low']:.2f}, {stat['ci_high']:.2f}]"
    assert f'{stat["mean"]:.2f} <span class="leaderboard-interval muted">{interval}</span>' in by_date
    assert 'data-sort="accuracy"' in by_date and 'data-sort="pass_rate"' in by_date
    assert f'href="{url("experiment", experiment_id=high.pk)}"' in by_date


def test_leaderboard_filters_by_branch_agent_and_model(client, tenant, board):
    dataset, low, middle, high = board
    client.force_login(tenant.viewer)
    page = url("leaderboard", dataset_id=dataset.pk)
    assert _order(client.get(page, {"branch": "main"}).content.decode()) == [str(high.pk), str(low.pk)]
    assert _order(client.get(page, {"agent": "bot", "model": "large"}).content.decode()) == [str(middle.pk)]
    assert "No ended experiment matches" in client.get(page, {"branch": "nope"}).content.decode()


@pytest.mark.parametrize("name", ["branch", "agent", "model"])
@pytest.mark.parametrize("page", ["leaderboard", "leaderboard-export"])
def test_leaderboard_filter_with_a_nul_character_is_a_400_naming_it(client, tenant, board, page, name):
    client.force_login(tenant.viewer)
    response = client.get(url(page, dataset_id=board[0].pk), {name: "ma\x00in"})
    assert response.status_code == 400
    assert f"{name.capitalize()}: contains a NUL character, which cannot be stored" in response.content.decode()


def test_leaderboard_leaves_out_running_experiments(client, tenant, setup, board):
    dataset = board[0]
    running = _start(tenant, setup)
    client.force_login(tenant.viewer)
    assert str(running.pk) not in _order(client.get(url("leaderboard", dataset_id=dataset.pk)).content.decode())


def test_leaderboard_charts_get_each_experiment_with_its_interval(client, tenant, board):
    dataset, low, middle, high = board
    client.force_login(tenant.viewer)
    html = client.get(url("leaderboard", dataset_id=dataset.pk), {"metric": "accuracy"}).content.decode()
    data = json.loads(re.search(r'<script id="leaderboard-data" type="application/json">(.*?)</script>', html).group(1))
    points = data["metrics"]["accuracy"]
    assert [point["name"] for point in points] == ["low", "middle", "high"]  # by date
    assert points[2]["cost"] == pytest.approx(0.03) and points[2]["mean"] == pytest.approx(0.9)
    assert points[2]["low"] <= 0.9 <= points[2]["high"]
    assert "vendor/plotly/plotly.min.js" in html and 'id="chart-score-cost"' in html and 'id="chart-score-time"' in html


# -- comparing two experiments --------------------------------------------------------------------


@pytest.fixture
def pair(tenant, setup):
    """On 40 items: a baseline, one clearly better (20 items go from 0 to 1) and one identical."""
    dataset = make_dataset(
        tenant.project, [{"key": f"c{i:02d}", "input": f"case {i}"} for i in range(40)], name="cases"
    )
    baseline_scores = [1.0 if i % 2 == 0 else 0.0 for i in range(40)]
    baseline = constructed(tenant.project, dataset, name="baseline", scores={"accuracy": baseline_scores})
    better = constructed(tenant.project, dataset, name="better", scores={"accuracy": [1.0] * 40})
    same = constructed(tenant.project, dataset, name="same", scores={"accuracy": list(baseline_scores)})
    return baseline, better, same


def _metric_row(html: str) -> str:
    return html.split('data-metric="accuracy"')[1].split("</tr>")[0]


def test_a_clear_improvement_is_significant_and_colored(client, tenant, pair):
    baseline, better, _same = pair
    client.force_login(tenant.viewer)
    html = client.get(url("compare"), {"a": baseline.pk, "b": better.pk}).content.decode()
    row = _metric_row(html)
    assert 'data-significant="true" class="change-improved"' in row
    assert "badge-significant" in row and "improved" in row and "+0.500" in row
    assert 'id="compare-counts"' in html and "20 improved" in html and "20 same" in html
    # Items with a change come first, with both outputs side by side.
    changes = re.findall(r'data-change="(\w+)"', html)
    assert changes[:20] == ["improved"] * 20 and set(changes[20:]) == {"same"}
    assert "baseline answer 1" in html and "better answer 1" in html


def test_a_regression_is_listed_first_and_colored_red(client, tenant, pair):
    baseline, better, _same = pair
    client.force_login(tenant.viewer)
    html = client.get(url("compare"), {"a": better.pk, "b": baseline.pk}).content.decode()
    assert 'class="change-regressed"' in _metric_row(html) and "badge-significant" in _metric_row(html)
    assert re.findall(r'data-change="(\w+)"', html)[0] == "regressed"
    assert 'class="delta-down">-1.00' in html


def test_identical_experiments_show_no_significant_change(client, tenant, pair):
    baseline, _better, same = pair
    client.force_login(tenant.viewer)
    html = client.get(url("compare"), {"a": baseline.pk, "b": same.pk}).content.decode()
    row = _metric_row(html)
    assert 'data-significant="false" class="change-unchanged"' in row
    assert "badge badge-significant" not in html and "no significant change" in row
    assert "40 same" in html


def test_compare_opened_without_experiments_shows_the_form(client, tenant, pair):
    # The leaderboard links the page with nothing chosen: the form, not a 400.
    client.force_login(tenant.viewer)
    response = client.get(url("compare"))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="a"' in html and 'name="b"' in html and 'id="compare-problem"' not in html


def test_compare_needs_two_experiments(client, tenant, pair):
    client.force_login(tenant.viewer)
    response = client.get(url("compare"), {"a": pair[0].pk})
    assert response.status_code == 400
    assert "Choose two experiments" in response.content.decode()


# -- tenants --------------------------------------------------------------------------------------


def test_another_tenants_experiments_and_datasets_are_404(client, tenant, other_tenant, pair):
    baseline = pair[0]
    theirs_dataset = make_dataset(other_tenant.project, _items(3), name="theirs")
    theirs = constructed(other_tenant.project, theirs_dataset, name="theirs", scores={"accuracy": [1.0, 0.0, 1.0]})
    client.force_login(tenant.owner)
    for name in ("experiment", "experiment-live", "experiment-export"):
        assert client.get(url(name, experiment_id=theirs.pk)).status_code == 404, name
    assert client.post(url("experiment-cancel", experiment_id=theirs.pk)).status_code == 404
    for name in ("leaderboard", "leaderboard-export"):
        assert client.get(url(name, dataset_id=theirs_dataset.pk)).status_code == 404, name
    assert client.get(url("compare"), {"a": baseline.pk, "b": theirs.pk}).status_code == 404
    assert client.get(url("compare"), {"a": theirs.pk, "b": baseline.pk}).status_code == 404
    listed = client.get(url("experiments")).content.decode()
    assert f"experiment-row-{theirs.pk}" not in listed and f"experiment-row-{baseline.pk}" in listed


def test_the_start_form_refuses_another_tenants_dataset(client, tenant, other_tenant, setup):
    agent, _dataset, evaluators = setup
    theirs = make_dataset(other_tenant.project, _items(3), name="theirs")
    client.force_login(tenant.member)
    response = client.post(
        url("experiments"),
        {"dataset": theirs.pk, "agent": agent.pk, "evaluators": [evaluators[0].pk], "concurrency": 4},
    )
    assert response.status_code == 400 and "Select a valid choice" in response.content.decode()
    with organization_scope(tenant.organization):
        assert Experiment.objects.count() == 0


def test_outsiders_cannot_see_the_pages(client, tenant, outsider, pair):
    client.force_login(outsider)
    assert client.get(url("experiment", experiment_id=pair[0].pk)).status_code == 404
    assert client.get(url("experiments")).status_code == 404


def test_an_experiment_page_shows_the_energy_of_its_runs_and_its_judge_calls(client, tenant, ended):
    from datetime import UTC, datetime
    from decimal import Decimal

    from django.db.models import Sum

    from billing.ledger import evaluation_usage_record, ledger_refresh
    from billing.models import RunUsage

    while ledger_refresh():
        pass
    evaluation_usage_record(
        organization_id=tenant.organization.pk,
        project_id=tenant.project.pk,
        model="mistral-small-latest",
        input_tokens=2000,
        cached_input_tokens=0,
        output_tokens=0,
        cost=Decimal("0.001"),
        price_id=None,
        at=datetime.now(UTC),
        experiment_id=ended.pk,
    )
    with organization_scope(tenant.organization):
        run_ids = ExperimentResult.objects.filter(experiment=ended).values_list("run_id", flat=True)
        tokens = (
            RunUsage.objects.filter(run_id__in=list(run_ids), category="llm")
            .exclude(model="")
            .aggregate(total=Sum("input_tokens") + Sum("output_tokens"))["total"]
        )
    assert tokens, "the experiment's runs used tokens"
    # The offline model has no factor of its own (the default 0.6 Wh per 1k); mistral-small 0.15.
    energy = Decimal(tokens) * Decimal("0.6") / 1000 + Decimal("0.3")
    client.force_login(tenant.viewer)
    html = client.get(url("experiment", experiment_id=ended.pk)).content.decode()
    assert f'id="experiment-{ended.pk}-carbon">≈ {energy:.2f} Wh' in html
