"""Forms of the job pages: a new job (command or evaluation), and the organization's
compute backends and job secrets. They parse what a person typed (shell-quoted command,
KEY=value lines, JSON) into the terms of ``jobs.services``; the services decide what
is allowed (hardware a backend has, env names, budgets) and their errors are shown on
the form."""

from __future__ import annotations

import shlex
from decimal import Decimal

from django import forms

from agentops.forms import json_object, version_field
from evals import selectors as evals_selectors
from evals.models import Dataset, Evaluator
from jobs import hardware as catalog
from jobs.models import ComputeBackend, Job, JobSecret
from jobs.services import ENV_NAME, MAX_TIME_LIMIT, MIN_TIME_LIMIT, offered_hardware

MAX_ENV_LINES = 200


def hourly_rates(*, backend: ComputeBackend | None, organization_id: int) -> dict[str, Decimal | None]:
    """Each catalog hardware's hourly rate on ``backend`` (None: no price for it)."""
    rates: dict[str, Decimal | None] = {}
    for name in catalog.CATALOG:
        price = (
            catalog.hourly_rate(hardware=name, backend_kind=backend.kind, organization_id=organization_id)
            if backend is not None
            else None
        )
        rates[name] = price.hourly if price is not None else None
    return rates


def parse_env(text: str) -> dict[str, str]:
    """``KEY=value`` lines (blank lines and ``#`` comments skipped) as a dict. Values
    are taken as typed, after the first ``=``: no quoting, no expansion."""
    env: dict[str, str] = {}
    lines = [line.strip() for line in (text or "").splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if len(lines) > MAX_ENV_LINES:
        raise forms.ValidationError(f"At most {MAX_ENV_LINES} variables.")
    for number, line in enumerate(lines, start=1):
        name, equals, value = line.partition("=")
        name = name.strip()
        if not equals:
            raise forms.ValidationError(f"Line {number}: write NAME=value.")
        if not ENV_NAME.fullmatch(name):
            raise forms.ValidationError(f"Line {number}: {name!r} is not an environment variable name.")
        if name in env:
            raise forms.ValidationError(f"Line {number}: {name} is given twice.")
        env[name] = value
    return env


class JobForm(forms.Form):
    """A new job. Command jobs run the command; evaluation jobs run the evaluation
    runner (or the command given) over a dataset and report into a new experiment."""

    kind = forms.ChoiceField(label="Kind", choices=Job.Kind.choices, initial=Job.Kind.COMMAND, widget=forms.RadioSelect)
    name = forms.CharField(label="Name", required=False, max_length=200, help_text="Blank: the command.")
    backend = forms.ModelChoiceField(queryset=ComputeBackend.objects.none(), label="Backend", empty_label=None)
    hardware = forms.ChoiceField(label="Hardware")
    image = forms.CharField(
        label="Image",
        required=False,
        max_length=500,
        help_text="The container image, where the backend runs containers.",
        widget=forms.TextInput(attrs={"placeholder": "e.g. pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"}),
    )
    command = forms.CharField(
        label="Command",
        required=False,
        max_length=20_000,
        strip=False,
        help_text="Shell-quoted, like a terminal line (no pipes or variables: the program runs directly). "
        "Evaluation jobs: blank runs the evaluation runner.",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "mono"}),
    )
    env = forms.CharField(
        label="Environment variables",
        required=False,
        strip=False,
        help_text="One NAME=value a line. Visible on the job's page: use secrets for anything private.",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "mono", "placeholder": "EPOCHS=3"}),
    )
    secrets = forms.MultipleChoiceField(
        label="Secrets",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="The organization's job secrets the job receives as variables of the same name. "
        "Their values are never shown.",
    )
    time_limit_minutes = forms.IntegerField(
        label="Time limit (minutes)",
        initial=60,
        min_value=max(1, MIN_TIME_LIMIT // 60),
        max_value=MAX_TIME_LIMIT // 60,
        help_text="The job is stopped when it runs longer; the estimate is the most it can cost.",
    )
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.none(), label="Dataset", required=False)
    dataset_version = version_field("Dataset version")
    evaluators = forms.ModelMultipleChoiceField(
        queryset=Evaluator.objects.none(),
        label="Evaluators",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Evaluators scored by people are left out: they score runs through annotation queues.",
    )
    model = forms.CharField(
        label="Model",
        required=False,
        max_length=500,
        help_text="What the job evaluates: given to it as AGENTOPS_MODEL.",
    )
    seconds_per_item = forms.FloatField(
        label="Seconds per item",
        required=False,
        min_value=0.001,
        help_text="If you know the speed: the estimate becomes items × seconds × the rate.",
    )

    def __init__(self, *args, project, complete: bool = True, **kwargs):
        """``complete=False`` checks the fields one by one but not that an evaluation
        has everything it needs: what the estimate wants while the form is filled in."""
        super().__init__(*args, **kwargs)
        self.project = project
        self.complete = complete
        backends = ComputeBackend.objects.filter(organization_id=project.organization_id, enabled=True).order_by("name")
        self.fields["backend"].queryset = backends
        self.fields["secrets"].choices = [
            (name, name)
            for name in JobSecret.objects.filter(organization_id=project.organization_id)
            .order_by("name")
            .values_list("name", flat=True)
        ]
        self.fields["dataset"].queryset = Dataset.objects.filter(project=project).order_by("name")
        self.fields["evaluators"].queryset = evals_selectors.automatic_evaluators(project=project)
        self.chosen_backend = self._chosen_backend(backends)
        self.rates = hourly_rates(backend=self.chosen_backend, organization_id=project.organization_id)
        # The chosen backend's hardware first; the rest says it is not offered there (the
        # service refuses it, the estimate says so).
        offered = offered_hardware(self.chosen_backend) if self.chosen_backend is not None else list(catalog.CATALOG)
        self.fields["hardware"].choices = [
            (name, f"{item.label} · " + self._price(name, offered))
            for name, item in sorted(catalog.CATALOG.items(), key=lambda entry: entry[0] not in offered)
        ]

    def _price(self, name: str, offered: list[str]) -> str:
        if name not in offered:
            return f"not offered by {self.chosen_backend.name}"
        return f"${self.rates[name]:.2f}/h" if self.rates[name] is not None else "no price"

    def _chosen_backend(self, backends) -> ComputeBackend | None:
        """The backend the hardware rates are shown for: the one chosen, else the first."""
        value = self.data.get(self.add_prefix("backend")) if self.is_bound else self.initial.get("backend")
        value = getattr(value, "pk", value)
        chosen = backends.filter(pk=value).first() if str(value or "").isdecimal() else None
        return chosen or backends.first()

    def clean_command(self) -> list[str]:
        text = self.cleaned_data["command"].strip()
        if not text:
            return []
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Could not read the command: {exc}.") from None

    def clean_env(self) -> dict[str, str]:
        return parse_env(self.cleaned_data["env"])

    def clean(self):
        cleaned = super().clean()
        if not self.complete:
            return cleaned
        if cleaned.get("kind") == Job.Kind.EVALUATION:
            for field in ("dataset", "evaluators", "model"):
                if field not in self.errors and not cleaned.get(field):
                    self.add_error(field, "An evaluation job needs this.")
        elif "command" not in self.errors and not cleaned.get("command"):
            self.add_error("command", "Give the command to run.")
        return cleaned

    @property
    def is_evaluation(self) -> bool:
        return self.cleaned_data.get("kind") == Job.Kind.EVALUATION

    def evaluation(self) -> dict | None:
        if not self.is_evaluation:
            return None
        data = self.cleaned_data
        return {
            "dataset": data["dataset"],
            "dataset_version": data["dataset_version"],
            "evaluators": list(data["evaluators"]),
            "model": data["model"].strip(),
            "seconds_per_item": data["seconds_per_item"],
        }

    def submission(self) -> dict:
        """The keyword arguments of ``jobs.services.job_submit`` (besides who and where)."""
        data = self.cleaned_data
        return {
            "backend": data["backend"],
            "hardware": data["hardware"],
            "name": data["name"],
            "image": data["image"],
            "command": data["command"] or None,
            "env": data["env"],
            "secret_names": data["secrets"],
            "time_limit_seconds": data["time_limit_minutes"] * 60,
            "evaluation": self.evaluation(),
        }


class SecretTextarea(forms.Textarea):
    """A textarea that never renders its value back (credentials typed once)."""

    def format_value(self, value):
        return None


class BackendForm(forms.Form):
    name = forms.CharField(label="Name", max_length=64, widget=forms.TextInput(attrs={"placeholder": "gpu-box"}))
    kind = forms.ChoiceField(label="Kind", choices=ComputeBackend.Kind.choices)
    config = forms.CharField(
        label="Settings (JSON)",
        required=False,
        initial="{}",
        help_text="Non-secret settings: address, namespace, base URL... (docs/jobs.md lists each kind's).",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "mono"}),
    )
    credentials = forms.CharField(
        label="Credentials (JSON)",
        required=False,
        help_text="Encrypted at rest and never shown again, not even here.",
        widget=SecretTextarea(attrs={"rows": 3, "spellcheck": "false", "class": "mono", "autocomplete": "off"}),
    )

    def clean_config(self) -> dict:
        return json_object(self.cleaned_data["config"], "The settings")

    def clean_credentials(self) -> dict:
        return json_object(self.cleaned_data["credentials"], "The credentials")


class BackendUpdateForm(forms.Form):
    config = forms.CharField(
        label="Settings (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "mono"}),
    )
    credentials = forms.CharField(
        label="Replace credentials (JSON)",
        required=False,
        help_text=(
            "Blank keeps the saved credentials; {} removes them. Changing where they go (the host, "
            "endpoint or address) or turning off verify_ssl needs them again here."
        ),
        widget=SecretTextarea(attrs={"rows": 3, "spellcheck": "false", "class": "mono", "autocomplete": "off"}),
    )

    def clean_config(self) -> dict:
        return json_object(self.cleaned_data["config"], "The settings")

    def clean_credentials(self) -> dict | None:
        text = self.cleaned_data["credentials"]
        return None if not text.strip() else json_object(text, "The credentials")


class JobSecretForm(forms.Form):
    name = forms.CharField(
        label="Name",
        max_length=128,
        help_text="The environment variable the job receives it as.",
        widget=forms.TextInput(attrs={"placeholder": "HF_TOKEN", "autocomplete": "off", "class": "mono"}),
    )
    value = forms.CharField(
        label="Value",
        max_length=65536,
        strip=False,
        help_text="Saving a name that exists replaces its value.",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
