"""Benchmark: the organization billing page's queries at volume.

Writes the ledger of a year of usage directly (``UsageDaily``: 365 days x 20 projects x
10 models x 3 agents = 219,000 rows standing for about 1,000,000 steps; the ledger is
what the page reads, never the steps) and 125,000 runs spread over the year (for the
"most expensive runs" table), plus three budgets, into a private embedded PostgreSQL.
Then times, for each period (last 30 days, last 90 days, this month):
  - the page's queries (totals, spend table, the chart (by model), the
    top 10 runs, the budgets' progress, the alerts), called as the view calls them,
  - the whole page (GET /o/<org>/billing/ through the Django test client, as an owner).
Prints p50/p95 of each against the goal (queries p95 < 300 ms).

bench/ledger_build.py (the ledger's own benchmark) builds its 1M steps through ingest;
this one writes the ledger rows directly so it runs in a minute.

    .venv/bin/python bench/billing_page.py [--runs 125000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from _platform import percentile, private_platform, timed

GOAL_MS = 300
PROJECTS, MODELS, AGENTS, DAYS = 20, 10, 3, 365


def load(organization, owner, runs: int) -> None:
    from django.db import connection

    from agentops.models import Project
    from billing.models import Budget
    from runs.models import Run

    projects = [
        Project.dangerously_unscoped_objects.create(organization=organization, name=f"Project {n}", slug=f"p{n}")
        for n in range(PROJECTS)
    ]
    today = datetime.now(UTC).date()
    with connection.cursor() as cursor:
        # One row per day, project, model and agent; ~1.4 steps per row on average and
        # 4.6 steps per row summed over the year: about 1M steps.
        cursor.execute(
            """
            INSERT INTO billing_usagedaily (organization_id, project_id, day, agent_name, model, api_key_id,
                end_user_id, input_tokens, cached_input_tokens, output_tokens, cost, steps, unpriced_steps,
                category, unit, reported_cost, reported_computed_cost)
            SELECT %s, p.id, %s::date - d, 'agent-' || a, 'model-' || m, NULL, '',
                   (random() * 20000)::bigint, 0, (random() * 2000)::bigint,
                   round((random() * 0.2)::numeric, 9), (random() * 9)::bigint + 1, (random() < 0.01)::int,
                   'llm', 'token', 0, 0
              FROM unnest(%s::bigint[]) AS p(id), generate_series(0, %s) AS d,
                   generate_series(1, %s) AS m, generate_series(1, %s) AS a
            """,
            [organization.pk, today, [p.pk for p in projects], DAYS - 1, MODELS, AGENTS],
        )
        cursor.execute("SELECT sum(steps), count(*) FROM billing_usagedaily")
        steps, rows = cursor.fetchone()
    print(f"ledger: {rows:,} UsageDaily rows standing for {steps:,} steps")
    rng = random.Random(7)
    now = datetime.now(UTC)
    batch = []
    for n in range(runs):
        started = now - timedelta(seconds=rng.random() * DAYS * 86400)
        batch.append(
            Run(
                organization=organization,
                project=projects[n % PROJECTS],
                trace_id=f"{n:032x}",
                name=f"run {n}",
                agent_name=f"agent-{n % AGENTS + 1}",
                status="succeeded",
                started_at=started,
                created_at=started,
                updated_at=started,
                total_cost=Decimal(f"{rng.random():.9f}"),
                input_tokens=rng.randint(100, 20000),
                output_tokens=rng.randint(10, 2000),
                step_count=8,
            )
        )
        if len(batch) == 1000:
            Run.dangerously_unscoped_objects.bulk_create(batch)
            batch = []
    Run.dangerously_unscoped_objects.bulk_create(batch)
    for scope, project in (("organization", None), ("project", projects[0]), ("project", projects[1])):
        Budget.dangerously_unscoped_objects.create(
            organization=organization, name=f"{scope} cap", scope=scope, project=project, amount=Decimal("1000")
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE billing_usagedaily")
        cursor.execute("ANALYZE runs_run")
    print(f"runs: {runs:,} over {DAYS} days")


def page_queries(organization, period: str) -> None:
    """What BillingIndexPage.get reads, in the same order."""
    from billing import spend
    from billing.models import BudgetAlert
    from billing.views import budget_rows

    window = spend.period_window(period)
    spend.totals_of(spend.organization_spend_table(organization=organization, window=window))
    # The page draws one dimension at a time (``?by=``); by model is the default.
    spend.organization_series(organization=organization, window=window, dimension="model")
    spend.top_runs(organization=organization, window=window)
    budget_rows(organization)
    list(BudgetAlert.objects.filter(organization=organization).order_by("-created_at")[:50])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=125_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with private_platform(ALLOWED_HOSTS="testserver,localhost,127.0.0.1"):
        run(args)


def run(args) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from agentops.models import Membership, Organization
    from agentops.roles import Role
    from agentops.scoping import organization_scope

    organization = Organization.objects.create(name="Bench", slug="bench")
    owner = get_user_model().objects.create_user(username="owner", email="owner@bench.example.com")
    Membership.dangerously_unscoped_objects.create(organization=organization, user=owner, role=Role.OWNER)
    started = time.perf_counter()
    load(organization, owner, args.runs)
    print(f"loaded in {time.perf_counter() - started:.0f} s")
    client = Client()
    client.force_login(owner)
    # Production settings expect collected static files (a manifest); the benchmark
    # times the page's work, not the static files, so it serves them unhashed.
    from django.conf import settings
    from django.test import override_settings

    storages = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    override_settings(STORAGES=storages).enable()
    print(f"{'what':<34}{'p50 ms':>10}{'p95 ms':>10}   goal p95 < {GOAL_MS} ms")
    worst = 0.0
    for period in ("30d", "90d", "month"):
        with organization_scope(organization):
            samples = timed(lambda period=period: page_queries(organization, period), args.repeat)
        p95 = percentile(samples, 0.95)
        worst = max(worst, p95)
        verdict = "ok" if p95 < GOAL_MS else "MISSED"
        print(f"{'queries, ' + period:<34}{percentile(samples, 0.5):>10.1f}{p95:>10.1f}   {verdict}")
        samples = timed(lambda period=period: client.get(f"/o/bench/billing/?period={period}"), args.repeat)
        print(f"{'whole page, ' + period:<34}{percentile(samples, 0.5):>10.1f}{percentile(samples, 0.95):>10.1f}")
    print(f"worst query p95: {worst:.1f} ms against {GOAL_MS} ms: {'met' if worst < GOAL_MS else 'MISSED'}")


if __name__ == "__main__":
    main()
