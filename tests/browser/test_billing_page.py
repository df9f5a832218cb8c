"""The organization's billing page in a real browser: spend stored through the write
path and the ledger, the totals, the table and the chart Plotly draws."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.scoping import organization_scope
from billing.ledger import ledger_refresh
from runs.events import StepEvent
from runs.ingest import ingest
from tests.browser.conftest import chromium_page
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _console_errors, _sign_in

pytestmark = pytest.mark.browser


def test_owner_reads_spend_by_model_drawn_by_plotly(
    asgi_server,  # noqa: F811 - the fixture imported above
    tenant,
    artifacts_dir,
):
    now = timezone.now()
    with organization_scope(tenant.organization):
        for day in range(3):
            at = now - timedelta(days=day)
            ingest(
                project=tenant.project,
                steps=[
                    StepEvent(
                        trace_id=f"r{day}",
                        span_id="a",
                        kind="llm",
                        model="mistral-large-2512",
                        input_tokens=1_000_000 * (day + 1),
                        started_at=at,
                    ),
                    StepEvent(
                        trace_id=f"r{day}",
                        span_id="b",
                        kind="llm",
                        model="mistral-small-2603",
                        input_tokens=2_000_000,
                        started_at=at,
                    ),
                ],
            )
    while ledger_refresh():
        pass

    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.owner)
        errors = _console_errors(page)
        page.goto(f"{asgi_server}/o/acme/billing/")
        # Plotly drew one bar series per model.
        page.wait_for_selector("#chart-spend .main-svg")
        legend = page.locator("#chart-spend .legendtext").evaluate_all("els => els.map(e => e.textContent)")
        assert sorted(legend) == ["mistral-large-2512", "mistral-small-2603"]
        assert page.locator("#chart-spend .bars .point").count() == 2 * 30, "a bar per model and day of the 30 days"
        # 1M + 2M + 3M input tokens of large at 0.50, 6M of small at 0.15 per million.
        assert "$3.90" in page.locator("body").inner_text()
        # Energy per day beside it: bars of Wh and a line of CO2e, one point a day. 6M tokens
        # of large at 6.0 Wh per 1k, 6M of small at 0.15: 36,900 Wh.
        page.wait_for_selector("#chart-carbon .main-svg")
        assert page.locator("#chart-carbon .bars .point").count() == 30
        assert "36900.0 Wh" in page.locator("#total-energy").inner_text()
        page.screenshot(path=str(artifacts_dir / "billing-page.png"), full_page=True)
        assert errors == []
