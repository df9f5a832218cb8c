"""A dataset's leaderboard in a real browser at a common laptop width: every column
shows whole (nothing scrolled out of view) and experiment names read on a line or two."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.browser.conftest import chromium_page
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _console_errors, _sign_in
from tests.evals.factories import make_dataset
from tests.evals.test_experiment_pages import constructed

pytestmark = pytest.mark.browser

WIDTH = 1400
METRICS = ("accuracy", "faithfulness", "tone")


@pytest.fixture
def board(tenant):
    """Four ended experiments with the long names, agents and models of real ones."""
    dataset = make_dataset(
        tenant.project, [{"key": f"q{i}", "input": f"question {i}", "expected": "x"} for i in range(10)]
    )
    start = timezone.now() - timedelta(days=4)
    names = [
        "support-bot nightly regression with retrieval and reranking, prompt v14",
        "support-bot with the new refund policy prompt and a longer system message",
        "baseline: mistral-small with no tools at all, for the cost comparison",
        "hotfix-2026-11-24 escalation rules rewritten after the incident review",
    ]
    for index, name in enumerate(names):
        constructed(
            tenant.project,
            dataset,
            name=name,
            scores={metric: [((index + item + len(metric)) % 3) / 2 for item in range(10)] for metric in METRICS},
            branch=f"feature/long-branch-name-{index}",
            agent="customer-support-agent",
            model="mistral-large-2512" if index % 2 else "mistral-small-2603",
            cost=f"0.00{index + 1}2345",
            created_at=start + timedelta(hours=index * 7),
        )
    return dataset


def test_the_leaderboard_fits_a_1400_pixel_window_without_cutting_a_column(
    asgi_server,  # noqa: F811 - the fixture imported above
    tenant,
    board,
    artifacts_dir,
):
    with chromium_page() as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        _sign_in(page, asgi_server, tenant.member)
        page.goto(f"{asgi_server}/o/acme/p/agent/evals/datasets/{board.pk}/leaderboard/")
        errors = _console_errors(page)
        page.locator("#leaderboard-table").wait_for()
        page.screenshot(path=str(artifacts_dir / "leaderboard-1400.png"), full_page=True)

        fit = page.evaluate(
            """() => {
              const table = document.getElementById("leaderboard-table");
              const wrap = table.closest(".table-wrap");
              const box = wrap.getBoundingClientRect();
              const headers = Array.from(table.tHead.rows[0].cells).map((cell) => {
                const r = cell.getBoundingClientRect();
                return {text: cell.textContent.trim(), left: r.left, right: r.right};
              });
              const lineHeight = parseFloat(getComputedStyle(table.tBodies[0].rows[0].cells[1]).lineHeight) || 20;
              const nameLines = Array.from(table.querySelectorAll("tbody tr td:nth-child(2) a")).map(
                (link) => Math.round(link.getBoundingClientRect().height / lineHeight));
              return {
                scroll: wrap.scrollWidth, client: wrap.clientWidth,
                wrapRight: box.right, windowWidth: document.documentElement.clientWidth,
                headers, nameLines,
              };
            }"""
        )
        assert fit["scroll"] <= fit["client"], f"the table scrolls sideways: {fit['scroll']} > {fit['client']} px"
        assert fit["wrapRight"] <= fit["windowWidth"], "the table runs past the window"
        cut = [h["text"] for h in fit["headers"] if h["right"] > fit["wrapRight"] + 0.5]
        assert cut == [], f"columns cut: {cut}"
        assert {"Latency p50", "Date"} <= {h["text"] for h in fit["headers"]}
        assert max(fit["nameLines"]) <= 2, f"names wrap to {fit['nameLines']} lines"
        assert errors == []
