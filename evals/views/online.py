"""Pages of evaluations: online evaluation. The rules list (evaluator, sampling rate,
filters, how many runs each scored) with a new-rule form; one rule's page to change its
sampling rate and filters, turn it off or on, or delete it.

Every write goes through ``evals.services.online``, whose errors are shown on the form,
never as a 500. Rules are looked up in the URL's project, so another tenant's id is a
404 like a missing one.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import path

from agentops.errors import ServiceError
from agentops.pages import Need, ProjectPage
from evals import selectors
from evals.models import Evaluator, OnlineRule
from evals.services import online

READ = Need("work:read", "see this project's online evaluation")
WRITE = Need("work:write", "change online evaluation")


class RuleSettingsForm(forms.Form):
    """The sampling rate (shown as a percentage) and the filters."""

    sampling_percent = forms.FloatField(
        label="Sampling rate (%)",
        min_value=0,
        max_value=100,
        initial=100,
        widget=forms.NumberInput(attrs={"step": "any", "min": "0", "max": "100"}),
        help_text="The share of matching runs scored. The choice of runs is fixed: scanning again never changes it.",
    )
    agent_name = forms.CharField(label="Agent name", required=False, max_length=200)
    environment = forms.CharField(
        required=False, max_length=200, widget=forms.TextInput(attrs={"placeholder": "e.g. production"})
    )
    tag = forms.CharField(required=False, max_length=200)

    def sampling_rate(self) -> float:
        return self.cleaned_data["sampling_percent"] / 100

    def filters(self) -> dict[str, str]:
        return {key: self.cleaned_data.get(key) or "" for key in online.FILTER_KEYS}

    @staticmethod
    def initial_from(rule: OnlineRule) -> dict:
        return {"sampling_percent": round(rule.sampling_rate * 100, 4), **(rule.filters or {})}


class RuleCreateForm(RuleSettingsForm):
    evaluator = forms.ChoiceField(help_text="Any evaluator but a human one; an LLM judge costs a model call per run.")
    field_order = ["evaluator", "sampling_percent", "agent_name", "environment", "tag"]

    def __init__(self, *args, evaluators: list[Evaluator], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["evaluator"].choices = [
            (str(evaluator.pk), f"{evaluator.name} ({evaluator.get_kind_display()})") for evaluator in evaluators
        ]


def percent(rate: float) -> str:
    """A sampling rate as people read it: 0.5 -> "50", 0.025 -> "2.5"."""
    return f"{round(rate * 100, 4):g}"


def rule_in_project(project, rule_id: int) -> OnlineRule:
    """The rule, looked up in the URL's project: another tenant's is a 404, like a missing one."""
    rule = OnlineRule.objects.filter(project=project, pk=rule_id).select_related("evaluator").first()
    if rule is None:
        raise Http404("online rule not found")
    return rule


class OnlineRulesPage(ProjectPage):
    """The project's online evaluation rules; members create one."""

    permissions = {"GET": READ, "POST": WRITE}

    def get(self, request, org_slug, project_slug):
        return self._render(RuleCreateForm(evaluators=list(selectors.automatic_evaluators(project=self.project))))

    def post(self, request, org_slug, project_slug):
        form = RuleCreateForm(request.POST, evaluators=list(selectors.automatic_evaluators(project=self.project)))
        if not form.is_valid():
            return self._render(form, status=400)
        try:
            rule = online.rule_create(
                project=self.project,
                actor=request.user,
                evaluator=int(form.cleaned_data["evaluator"]),
                sampling_rate=form.sampling_rate(),
                filters=form.filters(),
                ip=self.ip,
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self._render(form, status=exc.status)
        messages.success(
            request,
            f"Online evaluation with “{rule.evaluator.name}” is on: runs that end from now on are scored "
            "within a minute.",
        )
        return redirect("evals:online-rules", org_slug=org_slug, project_slug=project_slug)

    def _render(self, form: RuleCreateForm, *, status: int = 200) -> HttpResponse:
        rules = list(online.rule_list(project=self.project))
        for rule in rules:
            rule.sampling_percent = percent(rule.sampling_rate)
        return self.render_page(
            "evals/online_rules.html",
            {
                "rules": rules,
                "form": form,
                "has_evaluators": bool(form.fields["evaluator"].choices),
            },
            status=status,
        )


class OnlineRulePage(ProjectPage):
    """One rule: change its sampling rate and filters (``action=save``), turn it off or
    on (``action=disable`` / ``enable``) or delete it (``action=delete``)."""

    permissions = {"GET": READ, "POST": WRITE}

    def get(self, request, org_slug, project_slug, rule_id):
        rule = rule_in_project(self.project, rule_id)
        return self._render(rule, RuleSettingsForm(initial=RuleSettingsForm.initial_from(rule)))

    def post(self, request, org_slug, project_slug, rule_id):
        rule = rule_in_project(self.project, rule_id)
        action = request.POST.get("action", "save")
        back = redirect("evals:online-rules", org_slug=org_slug, project_slug=project_slug)
        name = rule.evaluator.name
        try:
            if action == "delete":
                online.rule_delete(rule=rule, actor=request.user, ip=self.ip)
                messages.success(request, f"The rule scoring with “{name}” was deleted; its scores stay on their runs.")
                return back
            if action in ("enable", "disable"):
                online.rule_update(rule=rule, actor=request.user, enabled=action == "enable", ip=self.ip)
                messages.success(
                    request,
                    f"Online evaluation with “{name}” is on again, from now on."
                    if action == "enable"
                    else f"Online evaluation with “{name}” is off.",
                )
                return back
        except ServiceError as exc:
            messages.error(request, exc.message)
            return back
        form = RuleSettingsForm(request.POST)
        if not form.is_valid():
            return self._render(rule, form, status=400)
        try:
            online.rule_update(
                rule=rule, actor=request.user, sampling_rate=form.sampling_rate(), filters=form.filters(), ip=self.ip
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self._render(rule, form, status=exc.status)
        messages.success(request, f"The rule scoring with “{name}” was saved.")
        return back

    def _render(self, rule: OnlineRule, form: RuleSettingsForm, *, status: int = 200) -> HttpResponse:
        rule.sampling_percent = percent(rule.sampling_rate)
        return self.render_page("evals/online_rule.html", {"rule": rule, "form": form}, status=status)


urlpatterns = [
    path("online-rules/", OnlineRulesPage.as_view(), name="online-rules"),
    path("online-rules/<int:rule_id>/", OnlineRulePage.as_view(), name="online-rule"),
]
