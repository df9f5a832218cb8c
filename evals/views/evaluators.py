"""Pages of evaluations: evaluators. The list with a new-evaluator form (a kind, its
configuration as JSON with an example per kind, a pass threshold); one evaluator, with
its edit form, archiving, and a "try it" form that scores a given output.

Every write goes through ``evals.services.evaluators``, whose errors are shown on the
form, never as a 500. Evaluators are looked up in the URL's project, so another
tenant's id is a 404 like a missing one.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import path

from agentops import jsonsafe
from agentops.errors import ServiceError
from agentops.forms import json_object
from agentops.pages import Need, ProjectPage
from evals.models import Evaluator
from evals.scoring import Subject, evaluate, get_kind, kinds, passed, spec_of
from evals.services.evaluators import evaluator_archive, evaluator_create, evaluator_input, evaluator_update

READ = Need("work:read", "see this project's evaluators")


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _json_or_text(text: str) -> Any:
    """A try-it value: JSON when it parses, else the text itself (empty: none)."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return jsonsafe.loads(text)
    except ValueError:  # not JSON, or JSON too deep to use: tried as the text it is
        return text


class EvaluatorForm(forms.Form):
    name = forms.CharField(
        max_length=64,
        help_text="The metric's name in results: letters, digits, _ or -, e.g. <code>correctness</code>.",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
    )
    kind = forms.ChoiceField(choices=Evaluator.Kind.choices, initial=Evaluator.Kind.EXACT_MATCH)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    config = forms.CharField(
        label="Configuration (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 9, "spellcheck": "false", "class": "code-input"}),
        help_text="Settings of the kind; the example shown changes with the kind. See docs/evaluations.md.",
    )
    threshold = forms.FloatField(
        label="Pass threshold",
        min_value=0,
        max_value=1,
        initial=0.5,
        widget=forms.NumberInput(attrs={"step": "any", "min": 0, "max": 1}),
        help_text="A score at or above it passes (scores run from 0 to 1).",
    )
    secret = forms.CharField(
        label="Signing secret (webhook only)",
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
        help_text="Leave empty to get a generated one, shown once.",
    )

    def clean_config(self) -> dict:
        return json_object(self.cleaned_data["config"], "The configuration")


class EvaluatorEditForm(EvaluatorForm):
    secret = forms.CharField(
        label="New signing secret",
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
        help_text="Webhook only. Empty keeps the current secret; a new URL needs the secret again here.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        del self.fields["kind"]

    @classmethod
    def initial_from(cls, evaluator: Evaluator) -> dict:
        return {
            "name": evaluator.name,
            "description": evaluator.description,
            "config": _pretty(evaluator.config),
            "threshold": evaluator.pass_threshold,
        }


class EvaluatorTryForm(forms.Form):
    input = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3, "class": "code-input"}))
    expected = forms.CharField(
        label="Expected output", required=False, widget=forms.Textarea(attrs={"rows": 3, "class": "code-input"})
    )
    output = forms.CharField(
        label="Output to score",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "class": "code-input"}),
        help_text="Each value is read as JSON when it parses, else as text.",
    )


def evaluator_in_project(project, evaluator_id: int) -> Evaluator:
    """The evaluator, looked up in the URL's project: another tenant's is a 404."""
    evaluator = Evaluator.objects.filter(project=project, pk=evaluator_id).first()
    if evaluator is None:
        raise Http404("evaluator not found")
    return evaluator


class EvaluatorsPage(ProjectPage):
    """The project's evaluators (``?archived=1`` shows archived ones too); members
    create one here. A new webhook evaluator's secret is in this response, once."""

    permissions = {"GET": READ, "POST": Need("work:write", "create evaluators")}

    def get(self, request, org_slug, project_slug):
        return self._render(EvaluatorForm(initial={"config": _pretty(get_kind(Evaluator.Kind.EXACT_MATCH).example)}))

    def post(self, request, org_slug, project_slug):
        form = EvaluatorForm(request.POST)
        if not form.is_valid():
            return self._render(form, status=400)
        data = form.cleaned_data
        try:
            evaluator, secret = evaluator_create(
                project=self.project, actor=request.user, kind=data["kind"], **evaluator_input(data), ip=self.ip
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self._render(form, status=exc.status)
        if secret:
            # Rendered, not redirected: the secret must never be stored (in the session
            # or a message) to survive a redirect.
            response = self._render(EvaluatorForm(), created=evaluator, secret=secret)
            response["Cache-Control"] = "no-store"
            return response
        messages.success(request, f"The evaluator “{evaluator.name}” was created. Try it on an output below.")
        return redirect("evals:evaluator", org_slug=org_slug, project_slug=project_slug, evaluator_id=evaluator.pk)

    def _render(self, form, *, status: int = 200, created=None, secret: str = "") -> HttpResponse:
        show_archived = self.request.GET.get("archived") == "1"
        evaluators = Evaluator.objects.filter(project=self.project).order_by("name")
        if not show_archived:
            evaluators = evaluators.filter(archived=False)
        return self.render_page(
            "evals/evaluators.html",
            {
                "evaluators": list(evaluators),
                "archived_count": Evaluator.objects.filter(project=self.project, archived=True).count(),
                "show_archived": show_archived,
                "form": form,
                "created": created,
                "secret": secret,
                # Each kind's example and line of help, under the kind picker and in the list.
                "examples": {kind.name: _pretty(kind.example) for kind in kinds()},
                "kind_help": {kind.name: kind.help for kind in kinds()},
            },
            status=status,
        )


class EvaluatorDetailPage(ProjectPage):
    """One evaluator: what it checks, its edit form, archiving, and trying it."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, evaluator_id):
        return self.render_evaluator(evaluator_in_project(self.project, evaluator_id))

    def render_evaluator(
        self,
        evaluator: Evaluator,
        *,
        edit_form: EvaluatorEditForm | None = None,
        try_form: EvaluatorTryForm | None = None,
        outcome: dict | None = None,
        status: int = 200,
    ) -> HttpResponse:
        return self.render_page(
            "evals/evaluators_detail.html",
            {
                "evaluator": evaluator,
                "config_json": _pretty(evaluator.config),
                "kind": get_kind(evaluator.kind),
                "edit_form": edit_form or EvaluatorEditForm(initial=EvaluatorEditForm.initial_from(evaluator)),
                "try_form": try_form or EvaluatorTryForm(),
                "outcome": outcome,
            },
            status=status,
        )


class EvaluatorEditAction(EvaluatorDetailPage):
    permissions = {"POST": Need("work:write", "edit evaluators")}

    def post(self, request, org_slug, project_slug, evaluator_id):
        evaluator = evaluator_in_project(self.project, evaluator_id)
        form = EvaluatorEditForm(request.POST)
        if not form.is_valid():
            return self.render_evaluator(evaluator, edit_form=form, status=400)
        data = form.cleaned_data
        try:
            evaluator_update(evaluator=evaluator, actor=request.user, **evaluator_input(data), ip=self.ip)
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self.render_evaluator(evaluator, edit_form=form, status=exc.status)
        messages.success(request, "Saved. Experiments started from now on use this version of the evaluator.")
        return redirect("evals:evaluator", org_slug=org_slug, project_slug=project_slug, evaluator_id=evaluator.pk)


class EvaluatorArchiveAction(ProjectPage):
    permissions = {"POST": Need("work:write", "archive evaluators")}

    def post(self, request, org_slug, project_slug, evaluator_id):
        evaluator = evaluator_in_project(self.project, evaluator_id)
        if request.POST.get("restore"):
            evaluator_update(evaluator=evaluator, actor=request.user, archived=False, ip=self.ip)
            messages.success(request, f"“{evaluator.name}” is back in use.")
        else:
            evaluator_archive(evaluator=evaluator, actor=request.user, ip=self.ip)
            messages.success(request, f"“{evaluator.name}” was archived; its past scores stay.")
        return redirect("evals:evaluator", org_slug=org_slug, project_slug=project_slug, evaluator_id=evaluator.pk)


class EvaluatorTryAction(EvaluatorDetailPage):
    """Score the given output with the evaluator and show the outcome (nothing stored)."""

    permissions = {"POST": Need("work:write", "try evaluators")}

    def post(self, request, org_slug, project_slug, evaluator_id):
        evaluator = evaluator_in_project(self.project, evaluator_id)
        form = EvaluatorTryForm(request.POST)
        if not form.is_valid():
            return self.render_evaluator(evaluator, try_form=form, status=400)
        subject = Subject.reported(
            item={
                "input": _json_or_text(form.cleaned_data["input"]),
                "expected": _json_or_text(form.cleaned_data["expected"]),
            },
            output=_json_or_text(form.cleaned_data["output"]),
        )
        spec = spec_of(evaluator)
        outcome = evaluate(spec, subject, organization=self.organization, project=self.project, source="try")
        result = {
            "value": outcome.value,
            "passed": passed(spec, outcome.value),
            "reasoning": outcome.reasoning,
            "error": outcome.error,
            "details": _pretty(outcome.details) if outcome.details else "",
        }
        return self.render_evaluator(evaluator, try_form=form, outcome=result)


evaluator = "evaluators/<int:evaluator_id>"
urlpatterns = [
    path("evaluators/", EvaluatorsPage.as_view(), name="evaluators"),
    path(f"{evaluator}/", EvaluatorDetailPage.as_view(), name="evaluator"),
    path(f"{evaluator}/edit/", EvaluatorEditAction.as_view(), name="evaluator_edit"),
    path(f"{evaluator}/archive/", EvaluatorArchiveAction.as_view(), name="evaluator_archive"),
    path(f"{evaluator}/try/", EvaluatorTryAction.as_view(), name="evaluator_try"),
]
