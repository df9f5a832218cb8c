"""Periodic work of billing: keep the ledger current, then raise the alerts it calls for."""

import logging
import time

from celery import shared_task

logger = logging.getLogger(__name__)

REFRESH_BATCH = 500
# Below the beat interval (10 s), so runs of the task rarely overlap; when they do,
# SKIP LOCKED gives each its own runs.
REFRESH_SECONDS = 8


@shared_task
def refresh_ledger() -> int:
    """Drain the ledger backlog (every 10 s), then evaluate budgets and spikes of the
    organizations whose usage changed. Idempotent: a mark is deleted with its refresh."""
    from billing.ledger import ledger_refresh

    touched: set[int] = set()
    done = 0
    deadline = time.monotonic() + REFRESH_SECONDS
    while time.monotonic() < deadline:
        count = ledger_refresh(REFRESH_BATCH, organizations=touched)
        done += count
        if count < REFRESH_BATCH:
            break
    for organization_id in sorted(touched):
        try:
            evaluate_budget_alerts(organization_id)
        except Exception:
            # One organization's failure must not hold back the others' alerts; its
            # next usage change (or a budget edit) evaluates it again.
            logger.exception("could not evaluate the budgets of organization %s", organization_id)
    return done


@shared_task
def evaluate_budget_alerts(organization_id: int) -> int:
    """Raise the alerts due for one organization (after its usage or a budget changed)."""
    from agentops.models import Organization
    from billing.alerts import evaluate_alerts

    if not Organization.objects.filter(pk=organization_id).exists():
        return 0  # deleted since
    return len(evaluate_alerts(organization_id))
