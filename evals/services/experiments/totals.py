"""An experiment's running totals (items completed and failed, cost, tokens, latency),
which its pages show while it runs: an item is added once it is scored and taken out
when it is reported again, each by one UPDATE adding to the stored totals, so scorings at the
same time never lose a count."""

from __future__ import annotations

from decimal import Decimal

from django.db import connection
from django.db.models import F
from django.utils import timezone

from evals.models import Experiment, ExperimentResult


def count_finished(experiment: Experiment, result: ExperimentResult) -> None:
    """Add one finished item to the experiment's running totals (once per item scored:
    the statement is written out, not compiled by the ORM each time)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE evals_experiment SET completed_count = completed_count + 1, error_count = error_count + %s, "
            "total_cost = total_cost + %s, total_tokens = total_tokens + %s, "
            "total_latency_ms = total_latency_ms + %s, updated_at = %s WHERE id = %s AND organization_id = %s",
            [
                1 if result.status == ExperimentResult.Status.ERROR else 0,
                Decimal(result.cost or 0),
                result.tokens or 0,
                result.latency_ms or 0,
                timezone.now(),
                experiment.pk,
                experiment.organization_id,
            ],
        )


def uncount_finished(experiment: Experiment, result: ExperimentResult) -> None:
    """Take a finished item out of the running totals (it is reported again)."""
    Experiment.objects.filter(pk=experiment.pk).update(
        completed_count=F("completed_count") - 1,
        error_count=F("error_count") - (1 if result.status == ExperimentResult.Status.ERROR else 0),
        total_cost=F("total_cost") - (result.cost or 0),
        total_tokens=F("total_tokens") - (result.tokens or 0),
        total_latency_ms=F("total_latency_ms") - (result.latency_ms or 0),
    )
