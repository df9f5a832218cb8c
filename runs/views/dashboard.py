"""The project dashboard: totals and charts over a time range, spend by category (LLM,
tools by unit, GPU jobs, evaluation) and the energy estimate. The aggregates come
from ``selectors.dashboard`` (computed in PostgreSQL); the page hands the series to
Plotly (served from the installed ``plotly`` package, never a CDN) as JSON."""

from __future__ import annotations

from datetime import UTC, timedelta
from decimal import Decimal

from agentops.charts import chart_label
from agentops.pages import Need, ProjectPage
from billing.carbon import daily_footprint
from billing.spend import Window, category_totals
from runs import selectors
from runs.forms import RANGE_LABELS, DashboardRangeForm

# The latency histogram draws the latest runs of the range, at most this many.
LATENCY_SAMPLE = 5000


def _number(value) -> float:
    # Charts plot floats; the totals on the page are formatted from the Decimals.
    return float(value) if value is not None else 0.0


def chart_data(board: dict, latencies: list[int], start, end) -> dict:
    """The series the page's charts draw, as plain JSON."""
    series = board["series"]
    # The selector buckets by hour up to two days, by day beyond.
    hourly = (end - start).total_seconds() <= 2 * 86400
    return {
        "range": [start.isoformat(), end.isoformat()],
        "bucket_ms": 3_600_000 if hourly else 86_400_000,
        "buckets": [row["bucket"].isoformat() for row in series],
        "runs": [row["runs"] for row in series],
        "failed": [row["failed"] for row in series],
        "error_rate": [round(row["failed"] / row["runs"] * 100, 2) if row["runs"] else 0 for row in series],
        "cost": [_number(row["cost"]) for row in series],
        "tokens_per_run": [round((row["tokens"] or 0) / row["runs"], 1) if row["runs"] else 0 for row in series],
        "cost_by_model": {
            "models": [chart_label(row["model"]) for row in board["cost_by_model"]],
            "cost": [_number(row["cost"]) for row in board["cost_by_model"]],
            "calls": [row["calls"] for row in board["cost_by_model"]],
        },
        "latencies_ms": latencies,
    }


class DashboardPage(ProjectPage):
    permissions = {"GET": Need("work:read", "see this project's dashboard")}

    def get(self, request, org_slug, project_slug):
        form = DashboardRangeForm(request.GET)
        start, end = form.window()
        board = selectors.dashboard(project=self.project, start=start, end=end)
        latencies = list(
            selectors.run_list(
                project=self.project, filters=selectors.RunFilters(started_after=start, started_before=end)
            )
            .exclude(latency_ms=None)
            .values_list("latency_ms", flat=True)[:LATENCY_SAMPLE]
        )
        totals = board["totals"]
        # Spend by category and the energy estimate come from the billing ledger, which
        # is per UTC day: the days the range touches (GPU jobs and judge calls included).
        days = Window(start.astimezone(UTC).date(), (end - timedelta(microseconds=1)).astimezone(UTC).date())
        return self.render_page(
            "runs/dashboard.html",
            {
                "form": form,
                "preset": form.preset,
                "presets": list(RANGE_LABELS.items()),
                "start": start,
                "end": end,
                "totals": totals,
                "total_tokens": (totals["input_tokens"] or 0) + (totals["output_tokens"] or 0),
                "total_cost": totals["cost"] or Decimal(0),
                "cost_by_model": board["cost_by_model"],
                "category_days": days,
                "categories": category_totals(organization=self.organization, window=days, project=self.project),
                "footprint": daily_footprint(organization=self.organization, window=days, project=self.project)[
                    "total"
                ],
                "chart": chart_data(board, latencies, start, end),
                "latency_sample": len(latencies),
                "latency_sample_limit": LATENCY_SAMPLE,
            },
        )
