"""Comparing two runs, at ``runs/compare/?a=<run id>&b=<run id>`` (a URL to share):
first the settings that differ (what a replay changed), then their metrics with
deltas, the final outputs side by side and inline, the steps
aligned pair by pair, and the final memory's differences. The difference itself is
``runs.compare``; this page only formats it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.urls import reverse

from agentops.pages import Need, ProjectPage
from runs import selectors
from runs.compare import compare_runs, run_pair
from runs.templatetags.runs_format import duration, money, tokens

RECENT_RUNS = 50
# (metric, label, how its values read)
METRIC_ROWS = (
    ("input_tokens", "Input tokens", "tokens"),
    ("output_tokens", "Output tokens", "tokens"),
    ("total_cost", "Cost", "money"),
    ("latency_ms", "Latency", "duration"),
    ("step_count", "Steps", "count"),
    ("llm_calls", "LLM calls", "count"),
    ("tool_calls", "Tool calls", "count"),
    ("errors", "Failed steps", "count"),
)
# (setting, label): what a replay may change, as the page names it (runs.compare.settings.SETTINGS).
SETTING_LABELS = {
    "model": "Model",
    "temperature": "Temperature",
    "top_p": "Top p",
    "max_tokens": "Max tokens",
    "random_seed": "Seed",
    "system_prompt": "System prompt",
    "tools": "Tools",
    "tool_mode": "Tool calls",
    "agent_version": "Agent version",
    "fork_step": "Forked at model call",
}
TOOL_MODES = {"recorded": "served from the recording", "live": "made for real"}
PARAMETER_SETTINGS = ("temperature", "top_p", "max_tokens", "random_seed")
FORMATS = {"tokens": tokens, "money": money, "duration": duration, "count": lambda value: f"{value:,}"}


class RunPairForm(forms.Form):
    a = forms.IntegerField(
        label="Run A (baseline)",
        min_value=1,
        widget=forms.NumberInput(attrs={"list": "compare-recent-runs", "placeholder": "Run id"}),
    )
    b = forms.IntegerField(
        label="Run B",
        min_value=1,
        widget=forms.NumberInput(attrs={"list": "compare-recent-runs", "placeholder": "Run id"}),
    )


def metric_rows(metrics: dict[str, dict]) -> list[dict[str, Any]]:
    """The metrics table: each value formatted as the runs pages show it, the delta signed."""
    rows = []
    for name, label, kind in METRIC_ROWS:
        values = metrics[name]
        read = Decimal if kind == "money" else (lambda value: value)
        a, b, delta = (None if values[key] is None else read(values[key]) for key in ("a", "b", "delta"))
        show = FORMATS[kind]
        if delta is None:
            delta_text = "—"
        elif delta == 0:
            delta_text = "no change"
        else:
            delta_text = ("+" if delta > 0 else "−") + show(abs(delta))
        percent = values["percent"]
        rows.append(
            {
                "name": name,
                "label": label,
                "a": "—" if a is None else show(a),
                "b": "—" if b is None else show(b),
                "delta": delta_text,
                "direction": "none" if not delta else ("up" if delta > 0 else "down"),
                "percent": "—" if percent is None else (f"{percent:+.1f}%" if percent else "0%"),
            }
        )
    return rows


def setting_text(name: str, value: Any) -> str:
    """One setting's value as the page shows it (a system prompt is shown by its diff)."""
    if name == "tools":
        return ", ".join(value) if value else ("none" if value is not None else "not recorded")
    if name == "tool_mode":
        return TOOL_MODES.get(value, value or "—")
    if value is None:
        if name in PARAMETER_SETTINGS:
            return "model default"
        return "from the start" if name == "fork_step" else "—"
    if name == "system_prompt":
        return value or "(empty)"
    return str(value)


def setting_rows(settings: dict) -> list[dict[str, Any]]:
    """The settings that differ, labelled and formatted, in the service's order."""
    return [
        {
            **change,
            "label": SETTING_LABELS[change["name"]],
            "a_text": setting_text(change["name"], change["a"]),
            "b_text": setting_text(change["name"], change["b"]),
        }
        for change in settings["changes"]
    ]


def all_setting_rows(settings: dict) -> list[dict[str, str]]:
    """Every setting of both runs, for reference."""
    return [
        {
            "name": name,
            "label": label,
            "a": setting_text(name, settings["a"][name]),
            "b": setting_text(name, settings["b"][name]),
        }
        for name, label in SETTING_LABELS.items()
        if name != "system_prompt"
    ]


def difference_where(difference: dict) -> str:
    """Where a difference is, as one path: ``result.eta``, ``output.tool_calls[0]``, ``error``."""
    path = difference["path"]
    if not path:
        return difference["field"]
    return f"{difference['field']}{'' if path.startswith('[') else '.'}{path}"


class RunComparePage(ProjectPage):
    """Two runs of the project compared; with no runs chosen yet, the form to pick them."""

    permissions = {"GET": Need("work:read", "compare this project's runs")}

    def get(self, request, org_slug, project_slug):
        if "a" in request.GET and "b" in request.GET:
            form = RunPairForm(request.GET)
        else:
            # One run named (a link to "compare this run with..."): the form starts from it.
            form = RunPairForm(initial={name: request.GET[name] for name in ("a", "b") if name in request.GET})
        context: dict[str, Any] = {
            "form": form,
            "recent_runs": selectors.run_list(project=self.project).only("id", "name", "trace_id")[:RECENT_RUNS],
        }
        if form.is_valid():
            # A run not in the project: NotFound, the 404 page (agentops.pages.refusal).
            a, b = run_pair(project=self.project, a_id=form.cleaned_data["a"], b_id=form.cleaned_data["b"])
            comparison = compare_runs(a, b)
            only_changes = request.GET.get("only") == "changes"
            pairs = comparison["steps"]["pairs"]
            for pair in pairs:
                for difference in pair["differences"]:
                    difference["where"] = difference_where(difference)
            kwargs = {"org_slug": org_slug, "project_slug": project_slug}
            context.update(
                {
                    "run_a": a,
                    "run_b": b,
                    "comparison": comparison,
                    "setting_changes": setting_rows(comparison["settings"]),
                    "all_settings": all_setting_rows(comparison["settings"]),
                    "metric_rows": metric_rows(comparison["metrics"]),
                    "pairs": [pair for pair in pairs if pair["status"] != "same"] if only_changes else pairs,
                    "only_changes": only_changes,
                    "urls": {
                        "a": reverse("runs:detail", kwargs={**kwargs, "run_id": a.pk}),
                        "b": reverse("runs:detail", kwargs={**kwargs, "run_id": b.pk}),
                        "compare": reverse("runs:compare", kwargs=kwargs),
                        "api": reverse("api-run-compare", kwargs=kwargs),
                    },
                }
            )
        return self.render_page("runs/compare.html", context)
