"""Forms of the billing page and the staff console."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

from django import forms
from django.utils import timezone

from agentops.models import ApiKey, Organization, Project
from billing import spend
from billing.models import BillingSettings, Budget, Price
from billing.reconcile import MAX_BYTES


class PeriodForm(forms.Form):
    period = forms.ChoiceField(choices=list(spend.PERIODS.items()), required=False)
    by = forms.ChoiceField(
        choices=[("model", "Model"), ("project", "Project"), ("agent", "Agent"), ("category", "Category")],
        required=False,
        label="Chart by",
    )

    def value(self, name: str, default: str) -> str:
        return (self.cleaned_data.get(name) if self.is_valid() else None) or default


class BudgetCostForm(forms.Form):
    budget_cost = forms.ChoiceField(choices=BillingSettings.BudgetCost.choices, label="Budgets count")


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.replace(";", ",").split(",") if part.strip()]


class BudgetForm(forms.Form):
    """A budget's fields; the organization's projects and API keys are the choices."""

    name = forms.CharField(max_length=100)
    scope = forms.ChoiceField(choices=Budget.Scope.choices)
    project = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    api_key = forms.TypedChoiceField(coerce=int, required=False, empty_value=None, label="API key")
    period = forms.ChoiceField(choices=Budget.Period.choices)
    amount = forms.DecimalField(min_value=Decimal("0.01"), max_digits=14, decimal_places=2, label="Limit (USD)")
    thresholds = forms.CharField(
        required=False,
        initial="50, 80, 100",
        help_text="Percentages of the limit that alert, e.g. 50, 80, 100.",
    )
    hard_limit = forms.BooleanField(required=False, label="Block new executed runs once reached")
    notify_emails = forms.CharField(required=False, label="Notify emails", help_text="Comma-separated.")
    webhook_url = forms.URLField(required=False, label="Slack-compatible webhook URL", assume_scheme="https")

    def __init__(self, *args, organization, **kwargs):
        super().__init__(*args, **kwargs)
        self.projects = {project.pk: project for project in Project.objects.filter(organization=organization)}
        self.api_keys = {
            key.pk: key for key in ApiKey.objects.filter(organization=organization, revoked_at__isnull=True)
        }
        self.fields["project"].choices = [("", "—")] + [(pk, p.name) for pk, p in self.projects.items()]
        self.fields["api_key"].choices = [("", "—")] + [
            (pk, f"{key.name} ({key.prefix})") for pk, key in self.api_keys.items()
        ]

    def clean_thresholds(self) -> list[int]:
        try:
            values = sorted({int(part) for part in _split(self.cleaned_data["thresholds"])})
        except ValueError:
            raise forms.ValidationError("Enter whole percentages separated by commas.") from None
        if any(value <= 0 or value > 1000 for value in values):
            raise forms.ValidationError("Percentages are between 1 and 1000.")
        return values

    def clean_notify_emails(self) -> list[str]:
        emails = _split(self.cleaned_data["notify_emails"])
        field = forms.EmailField()
        for email in emails:
            field.clean(email)
        return emails

    def clean(self):
        data = super().clean()
        scope = data.get("scope")
        if scope == Budget.Scope.PROJECT and not data.get("project"):
            self.add_error("project", "Pick the project this budget limits.")
        if scope == Budget.Scope.API_KEY and not data.get("api_key"):
            self.add_error("api_key", "Pick the API key this budget limits.")
        return data

    def service_fields(self) -> dict:
        """The cleaned data as the budget services take it."""
        data = dict(self.cleaned_data)
        scope = data["scope"]
        data["project"] = self.projects.get(data["project"]) if scope == Budget.Scope.PROJECT else None
        data["api_key"] = self.api_keys.get(data["api_key"]) if scope == Budget.Scope.API_KEY else None
        data["notify_emails"] = tuple(data["notify_emails"])
        return data

    @classmethod
    def initial_for(cls, budget: Budget) -> dict:
        return {
            "name": budget.name,
            "scope": budget.scope,
            "project": budget.project_id,
            "api_key": budget.api_key_id,
            "period": budget.period,
            "amount": budget.amount,
            "thresholds": ", ".join(str(value) for value in budget.thresholds),
            "hard_limit": budget.hard_limit,
            "notify_emails": ", ".join(budget.notify_emails),
        }


# --- The staff console -----------------------------------------------------------------


class ConsoleFilterForm(forms.Form):
    level = forms.ChoiceField(
        choices=[(level, level.title()) for level in spend.LEVELS], required=False, label="Spend by"
    )
    start = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    organization = forms.IntegerField(required=False, widget=forms.HiddenInput)
    project = forms.IntegerField(required=False, widget=forms.HiddenInput)
    model = forms.CharField(required=False, widget=forms.HiddenInput)
    day = forms.DateField(required=False, widget=forms.HiddenInput)

    def filters(self) -> tuple[str, spend.ConsoleFilters]:
        data = self.cleaned_data if self.is_valid() else {}
        today = timezone.now().astimezone(UTC).date()
        end = data.get("end") or today
        start = data.get("start") or spend.thirty_days_to(end)
        model = self.data.get("model") if "model" in self.data else None
        return data.get("level") or "organization", spend.ConsoleFilters(
            start=start,
            end=end,
            organization_id=data.get("organization"),
            project_id=data.get("project"),
            model=model,
            day=data.get("day"),
        )


class RunSearchForm(forms.Form):
    run = forms.IntegerField(
        min_value=1,
        label="Run id",
        error_messages={
            "required": "Enter a run id to find a run.",
            "invalid": "A run id is a whole number, such as 1042.",
            "min_value": "A run id is a whole number from 1.",
        },
    )


def _day_start(value) -> datetime:
    return datetime.combine(value, time.min, tzinfo=UTC)


class RecomputeForm(forms.Form):
    price = forms.ModelChoiceField(
        queryset=Price.objects.filter(kind=Price.Kind.LLM).order_by("pattern", "-effective_from"),
        help_text="Published or draft: a draft is only ever used here.",
    )
    start = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}), help_text="First day (UTC), included.")
    end = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}), help_text="Last day (UTC), included.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["price"].label_from_instance = lambda price: (
            f"{price} — {price.get_status_display()} — in {price.input_per_million} / out {price.output_per_million}"
            + "".join(
                f" / {label} {getattr(price, name)}"
                for name, label in (
                    ("cached_input_per_million", "cache read"),
                    ("cache_write_per_million", "cache write"),
                    ("reasoning_output_per_million", "reasoning"),
                )
                if getattr(price, name) is not None
            )
            + (f" / {len(price.tiers)} tier(s)" if price.tiers else "")
        )

    def clean(self):
        data = super().clean()
        if data.get("start") and data.get("end") and data["end"] < data["start"]:
            self.add_error("end", "The last day is before the first.")
        return data

    def window(self) -> tuple[datetime, datetime]:
        return _day_start(self.cleaned_data["start"]), _day_start(self.cleaned_data["end"] + timedelta(days=1))


class ReconcileForm(forms.Form):
    organization = forms.ModelChoiceField(queryset=Organization.objects.order_by("slug"), to_field_name="slug")
    file = forms.FileField(label="Provider usage export (CSV)")

    def clean_file(self):
        upload = self.cleaned_data["file"]
        if upload.size > MAX_BYTES:
            raise forms.ValidationError(f"The file is larger than {MAX_BYTES // (1024 * 1024)} MB.")
        return upload
