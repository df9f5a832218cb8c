"""Budgets: spend limits per organization, project or API key, per month or day, with
alert thresholds and an optional hard limit.

Spend is read from the ledger (``UsageDaily``) only, so it lags the trace store by the
ledger task's interval (seconds). A hard limit blocks new work the platform would pay
for on the organization's behalf (executed runs, replays, experiments, jobs) through
``check_work_allowed``; ingestion never calls it, so traces are never refused or dropped.
"""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agentops import crypto
from agentops.errors import InvalidRequest, PaymentRequired
from agentops.models import ApiKey, Organization, Project
from agentops.netguard import check_setting_url
from agentops.queueing import send_after_commit
from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.audit import acting_user, audit_record
from billing.models import BillingSettings, Budget
from billing.rollups import ledger_sums
from billing.tasks import evaluate_budget_alerts

DEFAULT_THRESHOLDS = (50, 80, 100)
MAX_AMOUNT = Decimal("999999999999.99")
MAX_THRESHOLD = 1000
MAX_EMAILS = 20
# What check_work_allowed names in its message, by kind of work.
WORK_NAMES = {"run": "executed runs", "replay": "replays", "experiment": "experiments", "job": "jobs"}
_UNSET = object()
_FIELDS = (
    "name",
    "scope",
    "project",
    "api_key",
    "period",
    "amount",
    "thresholds",
    "hard_limit",
    "notify_emails",
    "webhook_url",
)


def _clean_amount(value) -> Decimal:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise InvalidRequest("the amount must be a number of US dollars, like 250 or 99.50") from None
    if not amount.is_finite() or amount <= 0:
        raise InvalidRequest("the amount must be more than 0")
    if amount > MAX_AMOUNT or amount != amount.quantize(Decimal("0.01")):
        raise InvalidRequest("the amount must have at most 2 decimals and 12 digits before them")
    return amount


def _clean_thresholds(values) -> list[int]:
    cleaned = set()
    for value in values or ():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THRESHOLD:
            raise InvalidRequest(f"thresholds are whole percentages from 1 to {MAX_THRESHOLD}, like 50, 80, 100")
        cleaned.add(value)
    return sorted(cleaned)


def _clean_emails(values) -> list[str]:
    emails = []
    for value in values or ():
        email = str(value).strip().lower()
        try:
            validate_email(email)
        except ValidationError:
            raise InvalidRequest(f"{value!r} is not an email address") from None
        if email not in emails:
            emails.append(email)
    if len(emails) > MAX_EMAILS:
        raise InvalidRequest(f"at most {MAX_EMAILS} email addresses")
    return emails


def _clean_webhook(url: str) -> str:
    """The ciphertext of ``url`` (empty for none), refused if the platform may not call it."""
    url = (url or "").strip()
    if not url:
        return ""
    check_setting_url(url, field="webhook URL")
    return crypto.encrypt(url)


def _apply(budget: Budget, organization: Organization, fields: dict) -> None:
    """Validate ``fields`` and set them on ``budget``; the whole budget must be valid after."""
    if "name" in fields:
        name = (fields["name"] or "").strip()
        if not name or len(name) > 100:
            raise InvalidRequest("the budget needs a name of at most 100 characters")
        budget.name = name
    if "scope" in fields:
        if fields["scope"] not in Budget.Scope.values:
            raise InvalidRequest(f"scope must be one of {', '.join(Budget.Scope.values)}")
        budget.scope = fields["scope"]
    if "period" in fields:
        if fields["period"] not in Budget.Period.values:
            raise InvalidRequest(f"period must be one of {', '.join(Budget.Period.values)}")
        budget.period = fields["period"]
    if "amount" in fields:
        budget.amount = _clean_amount(fields["amount"])
    if "thresholds" in fields:
        budget.thresholds = _clean_thresholds(fields["thresholds"])
    if "hard_limit" in fields:
        budget.hard_limit = bool(fields["hard_limit"])
    if "notify_emails" in fields:
        budget.notify_emails = _clean_emails(fields["notify_emails"])
    if "webhook_url" in fields:
        budget.webhook_ciphertext = _clean_webhook(fields["webhook_url"])
    if "project" in fields:
        budget.project = fields["project"]
    if "api_key" in fields:
        budget.api_key = fields["api_key"]

    # The scope and its target must agree, and the target must be the organization's.
    if budget.scope == Budget.Scope.ORGANIZATION:
        budget.project, budget.api_key = None, None
    elif budget.scope == Budget.Scope.PROJECT:
        budget.api_key = None
        if not isinstance(budget.project, Project) or budget.project.organization_id != organization.pk:
            raise InvalidRequest("a project budget needs a project of this organization")
    else:
        budget.project = None
        if not isinstance(budget.api_key, ApiKey) or budget.api_key.organization_id != organization.pk:
            raise InvalidRequest("an API key budget needs an API key of this organization")


def _audit_view(budget: Budget) -> dict:
    """What the audit log keeps of a budget: everything but the webhook URL (a secret)."""
    return {
        "name": budget.name,
        "scope": budget.scope,
        "project": budget.project_id,
        "api_key": budget.api_key_id,
        "period": budget.period,
        "amount": str(budget.amount),
        "thresholds": list(budget.thresholds),
        "hard_limit": budget.hard_limit,
        "notify_emails": list(budget.notify_emails),
        "webhook": bool(budget.webhook_ciphertext),
    }


def _evaluate_after_commit(organization_id: int) -> None:
    """A new or lowered limit may already be crossed: evaluate alerts once committed (while
    Redis is down, the next ledger refresh of the organization evaluates them)."""
    send_after_commit(evaluate_budget_alerts, organization_id)


@transaction.atomic
def budget_create(
    *,
    organization: Organization,
    actor,
    name: str,
    amount,
    scope: str = Budget.Scope.ORGANIZATION,
    project: Project | None = None,
    api_key: ApiKey | None = None,
    period: str = Budget.Period.MONTHLY,
    thresholds=DEFAULT_THRESHOLDS,
    hard_limit: bool = False,
    notify_emails=(),
    webhook_url: str = "",
    ip: str | None = None,
) -> Budget:
    """Create a budget for ``organization`` (see the module docstring); audited."""
    budget = Budget(organization=organization, created_by=acting_user(actor))
    fields = dict(
        name=name,
        scope=scope,
        project=project,
        api_key=api_key,
        period=period,
        amount=amount,
        thresholds=thresholds,
        hard_limit=hard_limit,
        notify_emails=notify_emails,
        webhook_url=webhook_url,
    )
    _apply(budget, organization, fields)
    budget.save()
    audit_record(
        organization=organization, actor=actor, action="budget.create", target=budget, data=_audit_view(budget), ip=ip
    )
    _evaluate_after_commit(organization.pk)
    return budget


@transaction.atomic
def budget_update(*, budget: Budget, actor, ip: str | None = None, **changes) -> Budget:
    """Change some fields of ``budget`` (any of ``budget_create``'s); audited with the
    fields that changed, before and after."""
    unknown = sorted(set(changes) - set(_FIELDS))
    if unknown:
        raise InvalidRequest(f"unknown budget field {unknown[0]!r}")
    organization = budget.organization
    with organization_scope(organization):
        budget = Budget.objects.select_for_update().get(pk=budget.pk)
    before = _audit_view(budget)
    _apply(budget, organization, changes)
    budget.updated_at = timezone.now()
    budget.save()
    after = _audit_view(budget)
    changed = {key: {"from": before[key], "to": after[key]} for key in after if before[key] != after[key]}
    if "webhook_url" in changes and "webhook" not in changed:
        changed["webhook"] = {"from": before["webhook"], "to": after["webhook"], "replaced": True}
    audit_record(
        organization=organization,
        actor=actor,
        action="budget.update",
        target=budget,
        data={"changes": changed},
        ip=ip,
    )
    _evaluate_after_commit(organization.pk)
    return budget


@transaction.atomic
def budget_delete(*, budget: Budget, actor, ip: str | None = None) -> None:
    """Delete ``budget`` and its alerts; audited with what it was."""
    organization = budget.organization
    audit_record(
        organization=organization, actor=actor, action="budget.delete", target=budget, data=_audit_view(budget), ip=ip
    )
    with organization_scope(organization):
        Budget.objects.filter(pk=budget.pk).delete()


def budget_cost_of(organization: Organization) -> str:
    """Which cost the organization's ledger and budgets count (``BillingSettings.BudgetCost``)."""
    settings_row = BillingSettings.objects.filter(organization=organization).first()
    return settings_row.budget_cost if settings_row else BillingSettings.BudgetCost.COMPUTED


def budget_cost_set(*, organization: Organization, budget_cost: str, actor, ip: str | None = None) -> None:
    """Choose which cost the ledger counts: the platform's computed cost, or the one
    clients report (the computed one where a step reported none). The ledger applies it
    to the usage it records from now on (a ledger rebuild applies it to the past)."""
    if budget_cost not in BillingSettings.BudgetCost.values:
        raise InvalidRequest(f"budget_cost must be one of {', '.join(BillingSettings.BudgetCost.values)}.")
    with transaction.atomic():
        row, _ = BillingSettings.objects.select_for_update().get_or_create(organization=organization)
        if row.budget_cost == budget_cost:
            return
        before, row.budget_cost, row.updated_at = row.budget_cost, budget_cost, timezone.now()
        row.save(update_fields=["budget_cost", "updated_at"])
        audit_record(
            organization=organization,
            actor=actor,
            action="billing.budget_cost",
            target=row,
            data={"budget_cost": [before, budget_cost]},
            ip=ip,
        )


def utc_today() -> date:
    """Budgets and the ledger count days in UTC."""
    return datetime.now(UTC).date()


def budget_period(budget: Budget, day: date) -> tuple[date, date]:
    """The period of ``budget`` containing ``day``: (first day, first day after)."""
    if budget.period == Budget.Period.DAILY:
        return day, day + timedelta(days=1)
    start = day.replace(day=1)
    return start, start + timedelta(days=calendar.monthrange(day.year, day.month)[1])


def budget_spend(budget: Budget, at: date | None = None) -> dict:
    """Spend of ``budget`` in its period containing ``at`` (a UTC day, today by default),
    from the ledger: ``{spend, period_start, period_end, percent}``; ``period_end`` is
    the first day after the period."""
    day = at if at is not None else utc_today()
    start, end = budget_period(budget, day)
    where = {}
    if budget.scope == Budget.Scope.PROJECT:
        where["project_id"] = budget.project_id
    elif budget.scope == Budget.Scope.API_KEY:
        where["api_key_id"] = budget.api_key_id
    with dangerously_unscoped("a budget's spend, read for its own organization by pages and tasks alike"):
        rows = ledger_sums(
            organization_id=budget.organization_id,
            start=start,
            end=end - timedelta(days=1),
            measures=("cost",),
            where=where,
        )
    # A sum of nothing, or of zeros, is Decimal(0) (not 0E-9), as it always was.
    spend = (rows[0]["cost"] if rows else None) or Decimal(0)
    percent = spend * 100 / budget.amount if budget.amount else Decimal(0)
    return {"spend": spend, "period_start": start, "period_end": end, "percent": percent}


def check_work_allowed(*, project: Project, api_key: ApiKey | None = None, work: str) -> None:
    """Raise ``PaymentRequired`` (402) if a hard-limit budget covering ``project`` (its
    organization, itself, or ``api_key``) is reached. ``work``: run, replay, experiment
    or job. Called by the services that start paid work; never by ingestion."""
    if work not in WORK_NAMES:
        raise ValueError(f"unknown kind of work {work!r}")
    covering = Q(scope=Budget.Scope.ORGANIZATION) | Q(scope=Budget.Scope.PROJECT, project_id=project.pk)
    if api_key is not None:
        covering |= Q(scope=Budget.Scope.API_KEY, api_key_id=api_key.pk)
    with organization_scope(project.organization_id):
        budgets = list(Budget.objects.filter(covering, hard_limit=True).order_by("id"))
    for budget in budgets:
        spent = budget_spend(budget)
        if spent["spend"] < budget.amount:
            continue
        period = "today" if budget.period == Budget.Period.DAILY else "this month"
        raise PaymentRequired(
            f"The budget {budget.name!r} has reached its hard limit: ${spent['spend']:.2f} spent {period} "
            f"of ${budget.amount:.2f}. New {WORK_NAMES[work]} are blocked until "
            f"{spent['period_end']:%Y-%m-%d} (UTC); an owner or admin can raise it on the billing page.",
            details={
                "budget": budget.pk,
                "name": budget.name,
                "scope": budget.scope,
                "period": budget.period,
                "spend": str(spent["spend"]),
                "limit": str(budget.amount),
                "period_start": spent["period_start"].isoformat(),
                "period_end": spent["period_end"].isoformat(),
                "work": work,
            },
        )


def budget_status(*, project: Project, api_key: ApiKey | None = None) -> list[dict]:
    """The budgets covering ``project`` (its organization's, its own, and ``api_key``'s),
    each with its spend this period: ``[{"id", "name", "scope", "period", "amount",
    "hard_limit", "spend", "percent", "period_start", "period_end", "blocked"}]``."""
    covering = Q(scope=Budget.Scope.ORGANIZATION) | Q(scope=Budget.Scope.PROJECT, project_id=project.pk)
    if api_key is not None:
        covering |= Q(scope=Budget.Scope.API_KEY, api_key_id=api_key.pk)
    with organization_scope(project.organization_id):
        budgets = list(Budget.objects.filter(covering).order_by("id"))
    answer = []
    for budget in budgets:
        spent = budget_spend(budget)
        answer.append(
            {
                "id": budget.pk,
                "name": budget.name,
                "scope": budget.scope,
                "period": budget.period,
                "amount": budget.amount,
                "hard_limit": budget.hard_limit,
                **spent,
                "blocked": budget.hard_limit and spent["spend"] >= budget.amount,
            }
        )
    return answer
