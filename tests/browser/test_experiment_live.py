"""An experiment started from its page in a real browser, against the real ASGI
application (uvicorn, Channels over the real Redis layer) with a real Celery worker
running its items: the progress count and each item's score arrive on the open page
without a reload, and the page is sent nothing it has no place for."""

from __future__ import annotations

import csv
import io
import time

import pytest

from agentops.llm.offline import OfflineProvider
from agentops.scoping import organization_scope
from evals.models import Experiment, ExperimentResult
from runs.services.agents import agent_create
from tests.browser.conftest import chromium_page, wait_until
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _console_errors, _sign_in, _wait_live
from tests.evals.factories import make_dataset, make_evaluator

pytestmark = pytest.mark.browser

ITEMS = 8
# The offline model answers in about a millisecond: every item would be scored before
# the page opened. Slowed to this per call, items end one by one while the page watches.
MODEL_CALL_SECONDS = 1.0


@pytest.fixture
def slow_offline_model(monkeypatch):
    answer = OfflineProvider.chat

    def slow_chat(self, **kwargs):
        time.sleep(MODEL_CALL_SECONDS)
        return answer(self, **kwargs)

    # The worker runs in a thread of this process (tests/conftest.py), so the patch reaches it.
    monkeypatch.setattr(OfflineProvider, "chat", slow_chat)


def test_an_experiment_started_from_the_page_shows_its_scores_live(
    asgi_server,  # noqa: F811 - the fixture imported above
    celery_worker,
    slow_offline_model,
    tenant,
    artifacts_dir,
):
    with organization_scope(tenant.organization):
        agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
    # The offline model says "You said: <input>": even items expect words the answer holds.
    make_dataset(
        tenant.project,
        [
            {"key": f"q{i}", "input": f"question {i}", "expected": f"question {i}" if i % 2 == 0 else "elsewhere"}
            for i in range(ITEMS)
        ],
        name="questions",
    )
    make_evaluator(tenant.project, "mentions", "contains")

    base = f"{asgi_server}/o/acme/p/agent/evals/experiments"
    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.member)
        page.goto(f"{base}/")
        page.locator("#new-experiment > summary").click()
        page.check("input[name=evaluators]")
        page.fill("input[name=concurrency]", "1")
        page.fill("input[name=name]", "echo on questions")
        page.screenshot(path=str(artifacts_dir / "experiment-new.png"), full_page=True)
        page.click("#start-experiment")
        page.wait_for_url(f"{base}/*/")
        page.evaluate("window.__not_reloaded = true")
        errors = _console_errors(page)
        experiment_id = page.locator(".experiment-page").get_attribute("data-experiment-id")
        progress = f"#experiment-{experiment_id}-progress"
        done_at_load = int(page.locator(progress).get_attribute("data-completed"))
        assert page.locator(".result-row").count() == ITEMS, "every item has a row from the start"
        _wait_live(page)

        # Items are scored one by one: the count moves and scores appear in their rows.
        wait_until(page, f"Number(document.querySelector('{progress}').dataset.completed) >= 1")
        page.wait_for_selector(".result-row[data-status='done'] .score-pass")
        page.screenshot(path=str(artifacts_dir / "experiment-live-running.png"), full_page=True)
        wait_until(page, f"document.querySelector('{progress}').dataset.status === 'succeeded'")
        page.wait_for_selector(f"#experiment-{experiment_id}-summary")

        assert page.evaluate("window.__not_reloaded") is True
        assert done_at_load < ITEMS, "the experiment had not ended when its page opened"
        assert page.locator(f"#experiment-{experiment_id}-completed").inner_text() == str(ITEMS)
        assert page.locator(".result-row[data-status='done']").count() == ITEMS
        assert page.locator(".result-row .score-pass").count() == ITEMS // 2
        assert page.locator(".result-row .score-fail").count() == ITEMS // 2
        assert "0.50 [" in page.locator(f"{progress} [data-metric='mentions']").inner_text()
        assert page.locator("#experiment-cancel").count() == 0, "an ended experiment offers no Cancel"
        # The page hears only its own topics: not the rows, refreshes and streams of the
        # runs its items execute, which it has no place for (htmx would log
        # htmx:oobErrorNoTarget for each, ~150 for 8 items before).
        assert errors == []
        page.screenshot(path=str(artifacts_dir / "experiment-live-done.png"), full_page=True)

        # The download streams through the ASGI server (an async body reading in batches).
        download = page.request.get(f"{base}/{experiment_id}/export/?format=csv")
        assert download.ok and download.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(download.text())))
        assert sorted(row["item_key"] for row in rows) == [f"q{i}" for i in range(ITEMS)]
        assert {row["passed.mentions"] for row in rows} == {"true", "false"}

        # Its dataset's leaderboard lists it, with the interval.
        page.click("#experiment-leaderboard")
        page.wait_for_selector("#leaderboard-table")
        assert "echo on questions" in page.locator("#leaderboard-table").inner_text()
        page.wait_for_selector("#chart-score-cost .main-svg")
        page.screenshot(path=str(artifacts_dir / "experiment-leaderboard.png"), full_page=True)

    with organization_scope(tenant.organization):
        experiment = Experiment.objects.get(pk=experiment_id)
        statuses = set(ExperimentResult.objects.filter(experiment=experiment).values_list("status", flat=True))
    assert experiment.status == Experiment.Status.SUCCEEDED and statuses == {"done"}
    assert experiment.summary["metrics"]["mentions"]["mean"] == 0.5
