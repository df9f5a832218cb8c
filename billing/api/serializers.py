"""Bodies and query strings of the billing API (see docs/api.md, "Billing")."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from rest_framework import serializers

from agentops.api.serializers import InputSerializer
from billing import spend
from billing.models import Budget

# A range longer than this is refused: the ledger is per day, and a year and a bit is
# what a budget review or a CI check reads.
MAX_DAYS = 400


def _list(value: str, *, name: str, allowed) -> tuple[str, ...]:
    items = tuple(dict.fromkeys(part.strip() for part in (value or "").split(",") if part.strip()))
    unknown = [item for item in items if item not in allowed]
    if unknown:
        raise serializers.ValidationError(f"unknown {name} {unknown[0]!r}; use {', '.join(allowed)}")
    return items


class SpendQuerySerializer(InputSerializer):
    """``?start=&end=&group_by=&category=&project=&format=``."""

    start = serializers.DateField(required=False, help_text="First UTC day, included (default: 29 days before end).")
    end = serializers.DateField(required=False, help_text="Last UTC day, included (default: today).")
    group_by = serializers.CharField(required=False, default="day", allow_blank=True)
    category = serializers.CharField(required=False, default="", allow_blank=True)
    project = serializers.SlugField(required=False, help_text="A project's slug (organization endpoint only).")
    format = serializers.ChoiceField(choices=["json", "csv"], required=False, default="json")

    def validate_group_by(self, value):
        return _list(value, name="group_by", allowed=tuple(spend.GROUPS))

    def validate_category(self, value):
        return _list(value, name="category", allowed=spend.CATEGORIES)

    def validate(self, data):
        today = spend.period_window("30d").end
        end = data.get("end") or today
        start = data.get("start") or spend.thirty_days_to(min(end, today))
        if end < start:
            raise serializers.ValidationError({"end": [f"the range ends ({end}) before it starts ({start})"]})
        if (end - start).days + 1 > MAX_DAYS:
            raise serializers.ValidationError({"start": [f"the range is at most {MAX_DAYS} days"]})
        data["window"] = spend.Window(start, end)
        return data


class BudgetWriteSerializer(InputSerializer):
    """A budget's fields as the API takes them: a project by its slug, an API key by its id."""

    name = serializers.CharField(max_length=100)
    amount = serializers.DecimalField(max_digits=14, decimal_places=2, help_text="The limit in USD, more than 0.")
    scope = serializers.ChoiceField(choices=Budget.Scope.values, required=False)
    project = serializers.SlugField(required=False, allow_null=True)
    api_key = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    period = serializers.ChoiceField(choices=Budget.Period.values, required=False)
    thresholds = serializers.ListField(child=serializers.IntegerField(), required=False, max_length=20)
    hard_limit = serializers.BooleanField(required=False)
    notify_emails = serializers.ListField(child=serializers.CharField(max_length=254), required=False, max_length=20)
    webhook_url = serializers.CharField(required=False, allow_blank=True, max_length=2000)

    def validate_amount(self, value):
        if value <= 0:
            raise serializers.ValidationError("the amount must be more than 0")
        return value


class BudgetSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    scope = serializers.CharField()
    project = serializers.SerializerMethodField()
    api_key = serializers.SerializerMethodField()
    period = serializers.CharField()
    amount = serializers.DecimalField(max_digits=14, decimal_places=2)
    thresholds = serializers.ListField(child=serializers.IntegerField())
    hard_limit = serializers.BooleanField()
    notify_emails = serializers.ListField(child=serializers.CharField())
    webhook = serializers.SerializerMethodField(help_text="Whether a webhook is set (its URL is never shown).")
    status = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_project(self, budget) -> str | None:
        return budget.project.slug if budget.project_id else None

    def get_api_key(self, budget) -> dict | None:
        if not budget.api_key_id:
            return None
        return {"id": budget.api_key_id, "name": budget.api_key.name, "prefix": budget.api_key.prefix}

    def get_webhook(self, budget) -> bool:
        return bool(budget.webhook_ciphertext)

    def get_status(self, budget) -> dict:
        return budget_status(budget)


def budget_status(budget: Budget, at: date | None = None) -> dict:
    from billing.budgets import budget_spend

    spent = budget_spend(budget, at)
    return {
        "spend": str(spent["spend"]),
        "limit": str(budget.amount),
        "percent": str(spent["percent"].quantize(Decimal("0.01"))),
        "period_start": spent["period_start"].isoformat(),
        "period_end": spent["period_end"].isoformat(),
        "reached": spent["spend"] >= budget.amount,
        "blocking": budget.hard_limit and spent["spend"] >= budget.amount,
    }


class AlertSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    budget = serializers.IntegerField(source="budget_id", allow_null=True)
    kind = serializers.CharField()
    period_start = serializers.DateField()
    threshold = serializers.IntegerField()
    spend = serializers.DecimalField(max_digits=18, decimal_places=9)
    limit = serializers.DecimalField(max_digits=18, decimal_places=9, allow_null=True)
    message = serializers.CharField()
    created_at = serializers.DateTimeField()
