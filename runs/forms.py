"""Forms of the runs pages: the list's and the dashboard's filters, parsed from the query
string into the selectors' terms (``RunFilters``, a time range; what they mean lives in
``runs.selectors``), and the posted forms of saved views, ingestion settings, agents,
starting a run, webhook tools and replays, which hand their cleaned values to the
services."""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import urlencode

from django import forms
from django.utils import timezone

from agentops.forms import json_value
from runs.models import IngestSettings, Run, SavedView
from runs.selectors import SORTABLE, RunFilters
from runs.services.agents import MAX_STEP_LIMIT, PARAMETER_RANGES

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
    """Redaction rules, retention and W&B logging of a project (runs.services.settings validates)."""

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
    wandb_logging = forms.ChoiceField(
        choices=IngestSettings.WandbLogging.choices,
        required=False,
        label="Log to Weights & Biases",
        help_text="When the organization saved a W&B key (Secrets page): every ended run with its scores, "
        "or ended experiments only, or nothing.",
    )

    def clean_wandb_logging(self) -> str | None:
        return self.cleaned_data["wandb_logging"] or None  # not sent: unchanged

    def clean_custom_patterns(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data["custom_patterns"].splitlines() if line.strip()]


# --- Agents, runs started from a page, webhook tools ----------------------------------------
# Parsed here, validated by runs.services.agents and runs.execution: the bounds
# below only give the browser its hints (min, max, step), never a second set of rules.

MODEL_HELP = (
    "<code>offline</code> runs without any key: a scripted, deterministic stand-in that calls each tool once "
    "(not a language model). Otherwise a Mistral model name such as <code>mistral-large-latest</code>, run "
    "with the organization's Mistral key (Secrets)."
)
MODEL_SUGGESTIONS = ("offline", "mistral-large-latest", "mistral-medium-latest", "mistral-small-latest")
PARAMETER_LABELS = {
    "temperature": "Temperature",
    "top_p": "Top p",
    "max_tokens": "Max tokens",
    "random_seed": "Random seed",
}


def _unix_newlines(text: str) -> str:
    """Browsers send a textarea's line breaks as CRLF; the model, and a diff of two versions, see LF."""
    return text.replace("\r\n", "\n")


def _parameter_field(name: str, *, help_text: str = "", placeholder: str = "model default") -> forms.Field:
    low, high, kind = PARAMETER_RANGES[name]
    attrs = {"min": low, "max": high, "step": "any" if kind is float else 1, "placeholder": placeholder}
    field_class = forms.FloatField if kind is float else forms.IntegerField
    return field_class(
        label=PARAMETER_LABELS[name], required=False, help_text=help_text, widget=forms.NumberInput(attrs=attrs)
    )


class AgentConfigForm(forms.Form):
    """One version of an agent: what ``agent_version_create`` (and ``agent_create``) take.
    The tool choices are the project's tools at the time (``available_tools``)."""

    model = forms.CharField(
        max_length=200,
        help_text=MODEL_HELP,
        widget=forms.TextInput(attrs={"list": "model-suggestions", "spellcheck": "false", "autocomplete": "off"}),
    )
    system_prompt = forms.CharField(
        label="System prompt", required=False, widget=forms.Textarea(attrs={"rows": 5}), strip=False
    )
    tools = forms.MultipleChoiceField(label="Tools", required=False, widget=forms.CheckboxSelectMultiple)
    approval_tools = forms.MultipleChoiceField(
        label="Needs approval", required=False, widget=forms.CheckboxSelectMultiple
    )
    temperature = _parameter_field("temperature")
    top_p = _parameter_field("top_p")
    max_tokens = _parameter_field("max_tokens")
    random_seed = _parameter_field("random_seed", help_text="The same seed makes Mistral's sampling repeatable.")
    step_limit = forms.IntegerField(
        label="Step limit",
        initial=20,
        help_text="The run stops after this many model calls.",
        widget=forms.NumberInput(attrs={"min": 1, "max": MAX_STEP_LIMIT}),
    )

    def __init__(self, *args, tools: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.available = tools
        choices = [(name, name) for name in sorted(tools, key=lambda name: (not tools[name].builtin, name))]
        self.fields["tools"].choices = choices
        self.fields["approval_tools"].choices = choices

    @classmethod
    def initial_from(cls, version) -> dict:
        """A version's values, to prefill the edit form (it then saves a new version)."""
        return {
            "model": version.model,
            "system_prompt": version.system_prompt,
            "tools": list(version.tools),
            "approval_tools": list(version.approval_tools),
            "step_limit": version.step_limit,
            **{name: version.parameters.get(name) for name in PARAMETER_LABELS},
        }

    def clean_system_prompt(self) -> str:
        return _unix_newlines(self.cleaned_data["system_prompt"])

    def tool_rows(self) -> list[dict]:
        """One row per tool: its checkbox, its "needs approval" checkbox, what it is."""
        use = {widget.data["value"]: widget for widget in self["tools"]}
        approval = {widget.data["value"]: widget for widget in self["approval_tools"]}
        return [
            {
                "name": name,
                "builtin": self.available[name].builtin,
                "description": self.available[name].description,
                "use": use[name],
                "approval": approval[name],
            }
            for name, _label in self.fields["tools"].choices
        ]

    def parameter_fields(self) -> list:
        return [self[name] for name in PARAMETER_LABELS]

    def parameters(self) -> dict:
        return {name: self.cleaned_data[name] for name in PARAMETER_LABELS if self.cleaned_data.get(name) is not None}

    def config(self) -> dict:
        """The version's fields, as the services take them."""
        data = self.cleaned_data
        return {
            "model": data["model"],
            "system_prompt": data["system_prompt"],
            "tools": data["tools"],
            "approval_tools": data["approval_tools"],
            "parameters": self.parameters(),
            "step_limit": data["step_limit"],
        }


class AgentCreateForm(AgentConfigForm):
    name = forms.CharField(max_length=100, widget=forms.TextInput(attrs={"placeholder": "support-bot"}))
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))

    field_order = ["name", "description", "model", "system_prompt", "tools", "approval_tools"]


class RunStartForm(forms.Form):
    """Start a run of an agent: the user's message, which version, and per-run overrides."""

    input = forms.CharField(
        label="Input",
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "What is 6 * 7?"}),
        help_text="The user's message the run starts from.",
    )
    version = forms.TypedChoiceField(label="Version", coerce=int, required=False, empty_value=None)
    temperature = _parameter_field("temperature", placeholder="as saved")
    random_seed = _parameter_field("random_seed", placeholder="as saved")

    def __init__(self, *args, versions=(), latest: int = 0, **kwargs):
        kwargs.setdefault("auto_id", "run_%s")  # the page also holds the edit form's fields
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [("", f"Latest (version {latest})")] + [
            (number, f"Version {number}") for number in versions
        ]

    def clean_input(self) -> str:
        return _unix_newlines(self.cleaned_data["input"])

    def parameters(self) -> dict:
        return {
            name: self.cleaned_data[name]
            for name in ("temperature", "random_seed")
            if self.cleaned_data.get(name) is not None
        }


WEBHOOK_SCHEMA_EXAMPLE = """{
  "type": "object",
  "properties": {
    "order_id": {"type": "string", "description": "The order to look up"}
  },
  "required": ["order_id"]
}"""


class WebhookToolForm(forms.Form):
    name = forms.CharField(
        max_length=64,
        help_text="What the model calls it: letters, digits, _ or -, e.g. <code>lookup_order</code>.",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
    )
    url = forms.URLField(
        label="URL",
        max_length=500,
        assume_scheme="https",
        help_text="The platform POSTs each call here. Private and loopback addresses are refused.",
        widget=forms.URLInput(attrs={"placeholder": "https://tools.example.com/lookup-order"}),
    )
    description = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Tells the model when to use the tool.",
    )
    parameters = forms.CharField(
        label="Arguments (JSON schema)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "code-input"}),
        initial=WEBHOOK_SCHEMA_EXAMPLE,
        help_text='A JSON object schema (<code>"type": "object"</code>). Empty: the tool takes no arguments.',
    )
    timeout_seconds = forms.FloatField(
        label="Timeout (seconds)",
        initial=10.0,
        widget=forms.NumberInput(attrs={"min": 0.5, "max": 60, "step": "any"}),
    )

    def clean_parameters(self) -> dict | None:
        text = self.cleaned_data["parameters"].strip()
        if not text:
            return None
        schema = json_value(text)
        if not isinstance(schema, dict):
            raise forms.ValidationError('The schema must be a JSON object, such as {"type": "object", ...}.')
        return schema


class ReplayForm(forms.Form):
    """Replay a run: what to change (a field left as the run had it changes nothing), how
    tools are answered, where to fork, how many times. ``overrides()`` gives what the
    replay service takes."""

    model = forms.CharField(max_length=200, widget=forms.TextInput(attrs={"spellcheck": "false"}))
    system_prompt = forms.CharField(
        label="System prompt", required=False, widget=forms.Textarea(attrs={"rows": 3}), strip=False
    )
    version = forms.TypedChoiceField(label="Agent version", coerce=int, required=False, empty_value=None)
    tools = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    temperature = _parameter_field("temperature", placeholder="as the run")
    top_p = _parameter_field("top_p", placeholder="as the run")
    max_tokens = _parameter_field("max_tokens", placeholder="as the run")
    random_seed = _parameter_field("random_seed", placeholder="as the run")
    tool_mode = forms.ChoiceField(
        label="Tools",
        choices=[
            ("recorded", "Recorded: answer tool calls from this run (only the model changes)"),
            ("live", "Live: call the tools for real"),
        ],
        initial="recorded",
        widget=forms.RadioSelect,
    )
    unmatched = forms.ChoiceField(
        label="A call this run never made",
        choices=[("fail", "fails the replay"), ("live", "calls the live tool")],
        initial="fail",
        widget=forms.RadioSelect,
    )
    fork_step = forms.IntegerField(
        label="Fork at model call",
        required=False,
        min_value=1,
        help_text="Keep the run as it was before this model call (copied, no cost) and run from there.",
        widget=forms.NumberInput(attrs={"placeholder": "from the start"}),
    )
    repeat = forms.IntegerField(
        label="Repeat",
        min_value=1,
        max_value=20,
        initial=1,
        help_text="Run it several times to see how much it agrees.",
    )

    def __init__(self, *args, source_spec: dict, tool_choices: list[str], versions=(), can_fork: bool, **kwargs):
        kwargs.setdefault("auto_id", "replay_%s")
        kwargs.setdefault(
            "initial",
            {
                "model": source_spec.get("model", ""),
                "system_prompt": source_spec.get("system_prompt", ""),
                "tools": source_spec.get("tools", []),
            },
        )
        super().__init__(*args, **kwargs)
        self.source_spec = source_spec
        self.fields["tools"].choices = [(name, name) for name in tool_choices]
        if versions:
            self.fields["version"].choices = [("", "As the run")] + [(n, f"Version {n}") for n in versions]
        else:
            del self.fields["version"]
        if not can_fork:
            del self.fields["fork_step"]

    def clean_system_prompt(self) -> str:
        return _unix_newlines(self.cleaned_data["system_prompt"])

    def overrides(self) -> dict:
        data, spec = self.cleaned_data, self.source_spec
        overrides = {name: data[name] for name in PARAMETER_RANGES if data.get(name) is not None}
        if data.get("version"):
            overrides["version"] = data["version"]
        if data["model"].strip() != spec.get("model", ""):
            overrides["model"] = data["model"].strip()
        if data["system_prompt"] != _unix_newlines(spec.get("system_prompt", "")):
            overrides["system_prompt"] = data["system_prompt"]
        if sorted(data["tools"]) != sorted(spec.get("tools", [])):
            overrides["tools"] = data["tools"]
        return overrides
