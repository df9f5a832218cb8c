"""Budget alerts and spend spikes: raised once, delivered in-app, by email and by
webhook.

A threshold alert is raised once per budget, threshold and period: the unique
constraint on ``BudgetAlert`` decides, so two evaluations at once raise it once. When
several thresholds are crossed at the same time (spend jumps from 10% to 120%) each gets
its alert, but only the highest is delivered, so nobody gets three emails in a row.

Spike rule, per organization and UTC day D (today): a spike when
  spend(D) > 3 x mean(spend of D-7 .. D-1)   (days without usage count as 0),
  spend(D) - that mean >= $1                 (no alerts about cents), and
  at least 3 of those 7 days had spend       (a new organization has no baseline).
At most one spike alert per organization and day.

Delivery happens after the alert is committed and is at most once: a failed channel is
recorded in ``BudgetAlert.deliveries`` and never raised, and a crash between the two
leaves an alert that is shown on the billing page but was not pushed.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from decimal import Decimal

from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils.html import format_html

from agentops import crypto, live
from agentops.models import Membership, Organization
from agentops.netguard import check_outbound_url, outbound_session
from agentops.roles import ADMINS
from agentops.scoping import organization_scope
from billing.budgets import budget_spend, utc_today
from billing.models import Budget, BudgetAlert, UsageDaily

logger = logging.getLogger(__name__)

WEBHOOK_TIMEOUT = 5
SPIKE_FACTOR = 3
SPIKE_MIN_EXCESS = Decimal("1")
SPIKE_BASELINE_DAYS = 7
SPIKE_MIN_ACTIVE_DAYS = 3


def evaluate_alerts(organization_id: int, *, today=None) -> list[BudgetAlert]:
    """Raise and deliver the alerts due for the organization: every budget threshold
    crossed in the current period, and today's spike. Returns the alerts raised now."""
    today = today or utc_today()
    raised = []
    with organization_scope(organization_id):
        organization = Organization.objects.get(pk=organization_id)
        for budget in Budget.objects.filter(organization_id=organization_id).order_by("id"):
            raised += _evaluate_budget(organization, budget, today)
        spike = _evaluate_spike(organization, today)
        if spike is not None:
            raised.append(spike)
    return raised


def _raise_alert(**fields) -> BudgetAlert | None:
    """Create the alert, or None if it was raised before (the unique constraint)."""
    try:
        with transaction.atomic():
            return BudgetAlert.objects.create(**fields)
    except IntegrityError:
        return None


def _evaluate_budget(organization: Organization, budget: Budget, today) -> list[BudgetAlert]:
    if not budget.thresholds:
        return []
    spent = budget_spend(budget, today)
    crossed = [t for t in sorted(budget.thresholds) if spent["percent"] >= t]
    if not crossed:
        return []
    already = set(
        BudgetAlert.objects.filter(
            budget=budget, kind=BudgetAlert.Kind.THRESHOLD, period_start=spent["period_start"]
        ).values_list("threshold", flat=True)
    )
    raised = []
    for threshold in crossed:
        if threshold in already:
            continue
        alert = _raise_alert(
            organization=organization,
            budget=budget,
            kind=BudgetAlert.Kind.THRESHOLD,
            period_start=spent["period_start"],
            threshold=threshold,
            spend=spent["spend"],
            limit=budget.amount,
            message=_threshold_message(organization, budget, spent, threshold),
        )
        if alert is not None:
            raised.append(alert)
    for alert in raised[:-1]:
        alert.deliveries = {"skipped": f"superseded by the {raised[-1].threshold}% alert raised with it"}
        alert.save(update_fields=["deliveries"])
    if raised:
        deliver(raised[-1], budget=budget)
    return raised


def _threshold_message(organization, budget: Budget, spent: dict, threshold: int) -> str:
    period = "today" if budget.period == Budget.Period.DAILY else f"this month (from {spent['period_start']:%Y-%m-%d})"
    limit = (
        " It is a hard limit: new executed runs, replays, experiments and jobs are blocked."
        if (budget.hard_limit and spent["spend"] >= budget.amount)
        else ""
    )
    return (
        f"{organization.name}: budget {budget.name!r} passed {threshold}%: "
        f"${spent['spend']:.2f} of ${budget.amount:.2f} spent {period}.{limit}"
    )


def daily_spend(organization_id: int, first, last) -> dict:
    """The organization's spend per UTC day from ``first`` to ``last`` (inclusive), from
    the ledger; days without usage are absent."""
    rows = (
        UsageDaily.objects.filter(organization_id=organization_id, day__gte=first, day__lte=last)
        .values("day")
        .annotate(spend=Sum("cost"))
    )
    return {row["day"]: row["spend"] for row in rows}


def spike_detected(spend_by_day: dict, today) -> tuple[bool, Decimal, Decimal]:
    """The spike rule of the module docstring: (spike?, today's spend, baseline mean)."""
    today_spend = spend_by_day.get(today) or Decimal(0)
    previous = [spend_by_day.get(today - timedelta(days=n)) or Decimal(0) for n in range(1, SPIKE_BASELINE_DAYS + 1)]
    mean = sum(previous, Decimal(0)) / SPIKE_BASELINE_DAYS
    active_days = sum(1 for spend in previous if spend > 0)
    spike = (
        active_days >= SPIKE_MIN_ACTIVE_DAYS
        and today_spend > SPIKE_FACTOR * mean
        and today_spend - mean >= SPIKE_MIN_EXCESS
    )
    return spike, today_spend, mean


def _evaluate_spike(organization: Organization, today) -> BudgetAlert | None:
    spend_by_day = daily_spend(organization.pk, today - timedelta(days=SPIKE_BASELINE_DAYS), today)
    spike, today_spend, mean = spike_detected(spend_by_day, today)
    if not spike:
        return None
    if BudgetAlert.objects.filter(kind=BudgetAlert.Kind.SPIKE, budget=None, period_start=today).exists():
        return None
    alert = _raise_alert(
        organization=organization,
        budget=None,
        kind=BudgetAlert.Kind.SPIKE,
        period_start=today,
        threshold=0,
        spend=today_spend,
        limit=None,
        message=(
            f"{organization.name}: spend spike on {today:%Y-%m-%d} (UTC): ${today_spend:.2f} so far, "
            f"{today_spend / mean:.1f}x the daily average of the previous 7 days (${mean:.2f})."
        ),
    )
    if alert is not None:
        deliver(alert, budget=None)
    return alert


def deliver(alert: BudgetAlert, *, budget: Budget | None) -> dict:
    """Send ``alert`` on every channel; record and return each channel's outcome."""
    organization = alert.organization
    outcomes = {"in_app": _deliver_in_app(organization, alert), "email": _deliver_email(organization, alert, budget)}
    outcomes["webhook"] = _deliver_webhook(alert, budget) if budget is not None else "not configured"
    alert.deliveries = outcomes
    alert.save(update_fields=["deliveries"])
    return outcomes


def _deliver_in_app(organization, alert: BudgetAlert) -> str:
    # Shown on open billing pages, under the heading of their Alerts card; only those
    # allowed to see billing have it open with this topic (agentops/live.py TOPICS).
    html = format_html(
        '<div hx-swap-oob="afterend:#alerts > h2"><div class="alert alert-{}" role="alert">{}</div></div>',
        alert.kind,
        alert.message,
    )
    data = {"id": alert.pk, "kind": alert.kind, "threshold": alert.threshold, "message": alert.message}
    # announce() logs and swallows delivery failures itself.
    live.announce(organization=organization, topic=live.topic("billing"), event="billing.alert", html=html, data=data)
    return "sent"


def _recipients(organization, budget: Budget | None) -> list[str]:
    if budget is not None and budget.notify_emails:
        return list(budget.notify_emails)
    emails = (
        Membership.objects.filter(organization=organization, role__in=ADMINS)
        .select_related("user")
        .values_list("user__email", flat=True)
    )
    return sorted({email for email in emails if email})


def _deliver_email(organization, alert: BudgetAlert, budget: Budget | None) -> str:
    recipients = _recipients(organization, budget)
    if not recipients:
        return "no recipients"
    subject = "Spend spike" if alert.kind == BudgetAlert.Kind.SPIKE else f"Budget alert: {alert.threshold}%"
    body = f"{alert.message}\n\nAn owner or admin can change budgets on the billing page of {organization.name}."
    try:
        send_mail(f"[AgentOps] {subject} for {organization.name}", body, None, recipients)
    except Exception as exc:  # noqa: BLE001 - a failed channel is recorded, never raised
        logger.warning("could not email alert %s", alert.pk, exc_info=True)
        return f"failed: {exc.__class__.__name__}"
    return f"sent to {len(recipients)}"


def _deliver_webhook(alert: BudgetAlert, budget: Budget) -> str:
    if not budget.webhook_ciphertext:
        return "not configured"
    try:
        url = check_outbound_url(crypto.decrypt(budget.webhook_ciphertext))
        # Slack's incoming-webhook shape, which Mattermost, Discord (/slack) and
        # Teams workflows accept too. No redirects, and the session connects only to an
        # address it has just checked: the checked host is the one called. The status is
        # all the delivery records: the body is never read (read, an endless or trickled
        # one held the worker, the timeout bounding each wait only).
        with (
            outbound_session() as session,
            session.post(
                url, json={"text": alert.message}, timeout=WEBHOOK_TIMEOUT, allow_redirects=False, stream=True
            ) as response,
        ):
            status = response.status_code
    except Exception as exc:  # noqa: BLE001 - a failed channel is recorded, never raised
        logger.warning("could not call the webhook of budget %s", budget.pk, exc_info=True)
        return f"failed: {exc.__class__.__name__}: {str(exc)[:200]}"
    if status >= 300:
        return f"failed: HTTP {status}"
    return f"sent (HTTP {status})"
