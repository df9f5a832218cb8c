"""Forms of the runs pages. They only parse the query string into the selectors' terms
(``RunFilters``, a time range); what the filters mean lives in ``runs.selectors``."""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import urlencode

from django import forms
from django.utils import timezone

from runs.models import IngestSettings, Run, SavedView
from runs.selectors import SORTABLE, RunFilters

RANGES = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
RANGE_LABELS = {"1h": "Last hour", "24h": "Last 24 hours", "7d": "Last 7 days", "30d": "Last 30 days"}
SORT_LABELS = {
    "-started_at": "Newest first",
    "started_at": "Oldest first",
    "-cost": "Most expensive",
    "cost": "Cheapest",
    "-latency": "Slowest",
    "latency": "Fastest",
    "-tokens": "Most output tokens",
    "tokens": "Fewest output tokens",
}
DEFAULT_SORT = "-started_at"


def _text(label: str, placeholder: str = "", **kwargs) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"placeholder": placeholder}),
        **kwargs,
    )


class TimeRangeMixin(forms.Form):
    """A preset range (last hour ... last 30 days) or a custom start and end, in UTC."""

    range = forms.ChoiceField(label="Time range", required=False)
    started_after = forms.DateTimeField(
        label="From (UTC)", required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    started_before = forms.DateTimeField(
        label="To (UTC)", required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    range_choices: list[tuple[str, str]] = [("", "Any time"), *RANGE_LABELS.items(), ("custom", "Custom")]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["range"].choices = self.range_choices

    def clean(self):
        cleaned = super().clean()
        after, before = cleaned.get("started_after"), cleaned.get("started_before")
        if after and before and after >= before:
            self.add_error("started_before", "The end must be after the start.")
        return cleaned

    def time_range(self, now: datetime) -> tuple[datetime | None, datetime | None]:
        """(start, end) of the chosen range; either may be None (open-ended)."""
        data = self.cleaned_data if self.is_bound and hasattr(self, "cleaned_data") else {}
        preset = data.get("range") or ""
        if preset in RANGES:
            return now - RANGES[preset], None
        if preset == "custom" or data.get("started_after") or data.get("started_before"):
            return data.get("started_after"), data.get("started_before")
        return None, None


class RunFilterForm(TimeRangeMixin, forms.Form):
    """The runs list's filters, sort and search, from the query string."""

    q = forms.CharField(
        label="Search",
        required=False,
        max_length=500,
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "Search names, inputs and outputs"}),
    )
    status = forms.MultipleChoiceField(
        label="Status", required=False, choices=Run.Status.choices, widget=forms.CheckboxSelectMultiple
    )
    agent = _text("Agent", "support-bot")
    model = _text("Model", "mistral-large-2512")
    tag = _text("Tag", "production")
    session = _text("Session", "session id")
    environment = _text("Environment", "prod")
    trace_id = _text("Trace id", "4bf92f3577b34da6…")
    min_cost = forms.DecimalField(label="Min cost ($)", required=False, min_value=0, max_digits=18, decimal_places=9)
    max_cost = forms.DecimalField(label="Max cost ($)", required=False, min_value=0, max_digits=18, decimal_places=9)
    min_latency_ms = forms.IntegerField(label="Min latency (ms)", required=False, min_value=0)
    max_latency_ms = forms.IntegerField(label="Max latency (ms)", required=False, min_value=0)
    sort = forms.ChoiceField(label="Sort", required=False, choices=list(SORT_LABELS.items()))

    # Filters that live behind "More filters" (the search box and status are always shown).
    advanced = (
        "agent",
        "model",
        "tag",
        "session",
        "environment",
        "trace_id",
        "range",
        "started_after",
        "started_before",
        "min_cost",
        "max_cost",
        "min_latency_ms",
        "max_latency_ms",
    )

    def __init__(self, data=None, *args, **kwargs):
        super().__init__(data, *args, **kwargs)
        # A bound form always validates, so partial input still filters by its valid parts.
        self.is_valid()

    @property
    def value(self) -> dict:
        """The valid, non-empty inputs (invalid ones are shown as errors and ignored)."""
        cleaned = getattr(self, "cleaned_data", {})
        return {name: value for name, value in cleaned.items() if value not in (None, "", [])}

    @property
    def sort_key(self) -> str:
        sort = self.value.get("sort") or DEFAULT_SORT
        return sort if sort in SORTABLE else DEFAULT_SORT

    def filters(self, *, now: datetime | None = None) -> RunFilters:
        """The selectors' filters for these inputs."""
        value = self.value
        start, end = self.time_range(now or timezone.now())
        return RunFilters(
            status=value.get("status"),
            agent=value.get("agent"),
            model=value.get("model"),
            tag=value.get("tag"),
            session=value.get("session"),
            environment=value.get("environment"),
            trace_id=value.get("trace_id"),
            started_after=start,
            started_before=end,
            min_cost=value.get("min_cost"),
            max_cost=value.get("max_cost"),
            min_latency_ms=value.get("min_latency_ms"),
            max_latency_ms=value.get("max_latency_ms"),
            q=value.get("q"),
        )

    @property
    def is_filtered(self) -> bool:
        """Whether any filter narrows the list (sorting does not)."""
        return any(name != "sort" for name in self.value)

    @property
    def shows_advanced(self) -> bool:
        return any(name in self.value for name in self.advanced) or any(name in self.errors for name in self.advanced)

    def query_string(self) -> str:
        """The valid inputs as a query string, for links and saved views (no paging)."""
        pairs: list[tuple[str, str]] = []
        for name, value in self.value.items():
            if name == "sort" and value == DEFAULT_SORT:
                continue
            raw = self.data.getlist(name) if hasattr(self.data, "getlist") else [self.data.get(name)]
            pairs.extend((name, item) for item in raw if item not in (None, ""))
        return urlencode(pairs)


class SavedViewForm(forms.Form):
    """Name the list's current filters (``query``, normalised again by the view)."""

    name = forms.CharField(
        label="Save these filters as",
        max_length=SavedView._meta.get_field("name").max_length,
        widget=forms.TextInput(attrs={"placeholder": "Failed runs in prod"}),
    )
    query = forms.CharField(required=False, widget=forms.HiddenInput)


class DashboardRangeForm(TimeRangeMixin, forms.Form):
    """The dashboard's time range: a preset or a custom start and end."""

    range_choices = [*RANGE_LABELS.items(), ("custom", "Custom")]
    DEFAULT = "24h"

    def __init__(self, data=None, *args, **kwargs):
        super().__init__(data, *args, **kwargs)
        self.is_valid()

    def window(self, *, now: datetime | None = None) -> tuple[datetime, datetime]:
        """(start, end), never open-ended: the default is the last 24 hours."""
        now = now or timezone.now()
        data = getattr(self, "cleaned_data", {})
        preset = data.get("range") or ""
        if preset == "custom" or (not preset and (data.get("started_after") or data.get("started_before"))):
            end = data.get("started_before") or now
            start = data.get("started_after") or end - RANGES[self.DEFAULT]
            if start < end:
                return start, end
        return now - RANGES.get(preset, RANGES[self.DEFAULT]), now

    @property
    def preset(self) -> str:
        data = getattr(self, "cleaned_data", {})
        if data.get("range"):
            return data["range"]
        return "custom" if data.get("started_after") or data.get("started_before") else self.DEFAULT


class IngestSettingsForm(forms.Form):
    """Redaction rules and retention of a project (runs.services.settings validates)."""

    redact = forms.MultipleChoiceField(
        choices=IngestSettings.Redaction.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Redact before storing",
    )
    custom_patterns = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        label="Custom patterns",
        help_text="One regular expression per line; every match becomes [REDACTED].",
    )
    retention_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=3650,
        label="Keep runs for (days)",
        help_text="Older runs are deleted nightly. Leave empty to keep them.",
    )

    def clean_custom_patterns(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data["custom_patterns"].splitlines() if line.strip()]
