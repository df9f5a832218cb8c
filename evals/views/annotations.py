"""Pages of evaluations: annotation queues and human scores.

The queues list (members create one); a queue's review page, which shows a reviewer the
next run held for them (its input, final output and a link to the whole run) with one
input per human evaluator on that evaluator's scale, a comment, Submit and Skip, and
the queue's progress; adding runs to a queue. On a run's page, the evaluations panel
shows every score of the run and lets members score it or add it to a queue
(``scores_panel_context``).

Every write goes through ``evals.services.annotations``, whose errors are shown on the
form, never as a 500. Queues and runs are looked up in the URL's project, so another
tenant's id is a 404 like a missing one.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path

from agentops.errors import ServiceError
from agentops.pages import Need, ProjectPage
from evals.models import AnnotationQueue, Evaluator, QueueEntry, Score
from evals.services import annotations
from runs import selectors as run_selectors

READ = Need("work:read", "see this project's annotation queues")
SCORE = Need("work:write", "score runs")
# The run page has other forms (datasets): the panel's inputs get ids of their own.
PANEL_IDS = "run-score-%s"


# --- Forms ---------------------------------------------------------------------------------------


def scale_of(evaluator: Evaluator) -> str:
    return (evaluator.config or {}).get("scale", "0-1")


class HumanScoresForm(forms.Form):
    """One input per human evaluator, on its scale ("0-1": a number, "pass-fail": two
    choices, "1-5": five), and a comment. Inputs left empty are not scored."""

    comment = forms.CharField(
        required=False,
        max_length=annotations.MAX_COMMENT,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Why (optional): kept with your scores"}),
    )

    def __init__(self, *args, evaluators: list[Evaluator], **kwargs):
        super().__init__(*args, **kwargs)
        self.evaluators = evaluators
        for evaluator in evaluators:
            scale = scale_of(evaluator)
            if scale == "pass-fail":
                field = forms.ChoiceField(
                    choices=[("pass", "Pass"), ("fail", "Fail")], widget=forms.RadioSelect, required=False
                )
            elif scale == "1-5":
                field = forms.ChoiceField(
                    choices=[(str(number), str(number)) for number in range(1, 6)],
                    widget=forms.RadioSelect,
                    required=False,
                )
            else:
                field = forms.FloatField(
                    min_value=0,
                    max_value=1,
                    required=False,
                    widget=forms.NumberInput(attrs={"step": "0.01", "min": "0", "max": "1", "placeholder": "0 to 1"}),
                )
            field.label = evaluator.name
            field.evaluator = evaluator
            field.scale = scale
            self.fields[self.key(evaluator)] = field

    @staticmethod
    def key(evaluator: Evaluator) -> str:
        return f"score_{evaluator.pk}"

    def score_fields(self) -> list:
        """The bound fields of the scores, in the evaluators' order (for the template)."""
        return [self[self.key(evaluator)] for evaluator in self.evaluators]

    def clean(self):
        cleaned = super().clean()
        if not self.errors and not self.scores():
            raise forms.ValidationError("Give at least one score.")
        return cleaned

    def scores(self) -> dict[str, Any]:
        """``{evaluator name: value on its scale}`` of the inputs filled in."""
        scores = {}
        for evaluator in self.evaluators:
            value = self.cleaned_data.get(self.key(evaluator))
            if value is None or value == "":
                continue
            scores[evaluator.name] = int(value) if scale_of(evaluator) == "1-5" else value
        return scores

    @classmethod
    def initial_from(cls, scores: list[Score]) -> dict[str, Any]:
        """The form's initial values from a reviewer's own earlier scores (to change them)."""
        initial = {}
        for score in scores:
            if score.evaluator_id is None:
                continue
            raw = (score.details or {}).get("raw")
            if raw is None:
                raw = score.value
            scale = scale_of(score.evaluator)
            if scale == "pass-fail":
                raw = "pass" if score.value and score.value >= 1 else "fail"
            elif scale == "1-5":
                raw = str(round((score.value or 0) * 4) + 1)
            initial[f"score_{score.evaluator_id}"] = raw
        return initial


class QueueCreateForm(forms.Form):
    name = forms.CharField(max_length=100, widget=forms.TextInput(attrs={"autocomplete": "off"}))
    description = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text="What reviewers should look for."
    )
    evaluators = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple, help_text="The human evaluators reviewers score every run with."
    )

    def __init__(self, *args, evaluators: list[Evaluator], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["evaluators"].choices = [
            (str(evaluator.pk), f"{evaluator.name} ({scale_of(evaluator)})") for evaluator in evaluators
        ]


RUN_ID_SEPARATORS = re.compile(r"[\s,;]+")


class AddRunsForm(forms.Form):
    run_ids = forms.CharField(
        label="Run ids",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "e.g. 1201, 1202, 1207"}),
        help_text="Separated by commas, spaces or lines. Runs already in the queue are left as they are.",
    )

    def clean_run_ids(self) -> list[int]:
        parts = [part for part in RUN_ID_SEPARATORS.split(self.cleaned_data["run_ids"]) if part]
        bad = [part for part in parts if not part.isdecimal()]
        if bad:
            raise forms.ValidationError(f"Run ids are whole numbers; these are not: {', '.join(bad[:5])}.")
        if not parts:
            raise forms.ValidationError("Give at least one run id.")
        return [int(part) for part in parts]


class AddToQueueForm(forms.Form):
    queue = forms.ChoiceField(label="Annotation queue")

    def __init__(self, *args, queues: list[AnnotationQueue], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["queue"].choices = [(str(queue.pk), queue.name) for queue in queues]


# --- Lookups -------------------------------------------------------------------------------------


def queue_in_project(project, queue_id: int) -> AnnotationQueue:
    """The queue, looked up in the URL's project: another tenant's is a 404, like a missing one."""
    queue = AnnotationQueue.objects.filter(project=project, pk=queue_id).first()
    if queue is None:
        raise Http404("annotation queue not found")
    return queue


def queue_evaluators(queue: AnnotationQueue) -> list[Evaluator]:
    return list(queue.evaluators.filter(archived=False).order_by("name"))


def own_scores(run, user) -> list[Score]:
    return list(annotations.run_scores(run=run).filter(source=Score.Source.HUMAN, author=user))


# --- The queues list -----------------------------------------------------------------------------


class QueuesPage(ProjectPage):
    """The project's annotation queues with their progress; members create one."""

    permissions = {"GET": READ, "POST": Need("work:write", "create annotation queues")}

    def get(self, request, org_slug, project_slug):
        return self._render(self._form())

    def post(self, request, org_slug, project_slug):
        form = self._form(request.POST)
        if not form.is_valid():
            return self._render(form, status=400)
        try:
            queue = annotations.queue_create(
                project=self.project,
                actor=request.user,
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
                evaluator_ids=[int(value) for value in form.cleaned_data["evaluators"]],
                ip=self.ip,
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self._render(form, status=exc.status)
        messages.success(request, f"The queue “{queue.name}” was created. Add runs to it below.")
        return redirect("evals:queue", org_slug=org_slug, project_slug=project_slug, queue_id=queue.pk)

    def _form(self, data=None) -> QueueCreateForm:
        return QueueCreateForm(data, evaluators=list(annotations.human_evaluators(project=self.project)))

    def _render(self, form: QueueCreateForm, *, status: int = 200) -> HttpResponse:
        queues = list(
            AnnotationQueue.objects.filter(project=self.project).prefetch_related("evaluators").order_by("name")
        )
        rows = [(queue, annotations.queue_progress(queue=queue)) for queue in queues]
        return self.render_page(
            "evals/queue_list.html",
            {"rows": rows, "form": form, "has_human_evaluators": bool(form.fields["evaluators"].choices)},
            status=status,
        )


# --- Reviewing a queue ---------------------------------------------------------------------------


class QueueReviewPage(ProjectPage):
    """A queue's next run for the reviewer (held for them a few minutes, so others get
    other runs), with the scores form; POST ``action=submit`` or ``action=skip`` for
    ``entry``, then the next one is shown. Viewers see the next run without a form."""

    permissions = {"GET": READ, "POST": SCORE}

    def get(self, request, org_slug, project_slug, queue_id):
        queue = queue_in_project(self.project, queue_id)
        if self.access.allows("work:write"):
            entry = annotations.next_entry(queue=queue, user=request.user)
        else:
            # Viewers only look: no claim, so reviewers are not kept from the run.
            entry = (
                QueueEntry.objects.filter(queue=queue, status=QueueEntry.Status.PENDING)
                .select_related("run")
                .order_by("id")
                .first()
            )
        form = None
        if entry is not None and self.access.allows("work:write"):
            form = HumanScoresForm(
                evaluators=queue_evaluators(queue),
                initial=HumanScoresForm.initial_from(own_scores(entry.run, request.user)),
            )
        return self._render(queue, entry, form)

    def post(self, request, org_slug, project_slug, queue_id):
        queue = queue_in_project(self.project, queue_id)
        entry_id = request.POST.get("entry", "")
        entry = (
            QueueEntry.objects.filter(queue=queue, pk=int(entry_id)).select_related("run", "queue").first()
            if entry_id.isdecimal()
            else None
        )
        if entry is None:
            raise Http404("queue entry not found")
        back = redirect("evals:queue", org_slug=org_slug, project_slug=project_slug, queue_id=queue.pk)
        if request.POST.get("action") == "skip":
            annotations.skip_entry(entry=entry, actor=request.user, ip=self.ip)
            messages.info(request, f"Skipped run {entry.run_id}: nobody is shown it again in this queue.")
            return back
        form = HumanScoresForm(request.POST, evaluators=queue_evaluators(queue))
        if not form.is_valid():
            return self._render(queue, entry, form, status=400)
        try:
            saved = annotations.submit_scores(
                author=request.user,
                entry=entry,
                scores=form.scores(),
                comment=form.cleaned_data["comment"],
                ip=self.ip,
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self._render(queue, entry, form, status=exc.status)
        given = ", ".join(f"{score.name} {score.value:.2f}" for score in saved)
        messages.success(request, f"Saved your scores of run {entry.run_id} ({given}). Here is the next one.")
        return back

    def _render(self, queue, entry, form, *, status: int = 200) -> HttpResponse:
        progress = annotations.queue_progress(queue=queue)
        finished = progress["done"] + progress["skipped"]
        return self.render_page(
            "evals/queue_review.html",
            {
                "queue": queue,
                "entry": entry,
                "run": entry.run if entry else None,
                "form": form,
                "progress": progress,
                "finished": finished,
                "percent": round(100 * finished / progress["total"]) if progress["total"] else 0,
                "evaluators": queue_evaluators(queue),
                "add_runs_form": AddRunsForm() if self.access.allows("work:write") else None,
            },
            status=status,
        )


class QueueAddRunsAction(ProjectPage):
    """Add runs to a queue by id, from the queue's page."""

    permissions = {"POST": Need("work:write", "add runs to annotation queues")}

    def post(self, request, org_slug, project_slug, queue_id):
        queue = queue_in_project(self.project, queue_id)
        form = AddRunsForm(request.POST)
        if not form.is_valid():
            messages.error(request, " ".join(error for errors in form.errors.values() for error in errors))
        else:
            try:
                added = annotations.queue_add_runs(
                    queue=queue, actor=request.user, run_ids=form.cleaned_data["run_ids"], ip=self.ip
                )
            except ServiceError as exc:
                messages.error(request, f"No runs were added: {exc.message}.")
            else:
                given = len(set(form.cleaned_data["run_ids"]))
                kept = f" ({given - added} were in it already)" if added < given else ""
                messages.success(request, f"Added {added} run{'s' if added != 1 else ''} to “{queue.name}”{kept}.")
        return redirect("evals:queue", org_slug=org_slug, project_slug=project_slug, queue_id=queue.pk)


# --- The run page's panel ------------------------------------------------------------------------


def scores_panel_context(page, run) -> dict:
    """Context of templates/evals/_run_panel_scores.html: the run's scores (every source,
    the author of human ones), and for members the form that scores it with the
    project's human evaluators and the one that adds it to an annotation queue."""
    scores = list(annotations.run_scores(run=run))
    context: dict[str, Any] = {"run_scores": scores}
    if page.access.allows("work:write"):
        evaluators = list(annotations.human_evaluators(project=page.project))
        if evaluators:
            mine = [
                score
                for score in scores
                if score.source == Score.Source.HUMAN and score.author_id == page.request.user.pk
            ]
            context["run_score_form"] = HumanScoresForm(
                evaluators=evaluators, initial=HumanScoresForm.initial_from(mine), auto_id=PANEL_IDS
            )
        queues = list(AnnotationQueue.objects.filter(project=page.project).order_by("name"))
        in_queues = set(QueueEntry.objects.filter(run=run).values_list("queue_id", flat=True))
        context["run_queues"] = [queue for queue in queues if queue.pk in in_queues]
        available = [queue for queue in queues if queue.pk not in in_queues]
        if available:
            context["run_queue_form"] = AddToQueueForm(queues=available)
    else:
        in_queues = QueueEntry.objects.filter(run=run).values_list("queue_id", flat=True)
        context["run_queues"] = list(
            AnnotationQueue.objects.filter(project=page.project, pk__in=in_queues).order_by("name")
        )
    return context


class _PanelAction(ProjectPage):
    """A form of the run panel's scores part: from htmx it answers that part again with
    the outcome (200 either way: htmx swaps only successful responses); from a plain
    form it goes back to the run's page with a message."""

    def answer(self, run, ok: bool, text: str, *, form=None, form_key: str = "") -> HttpResponse:
        if not self.request.htmx:
            (messages.success if ok else messages.error)(self.request, text)
            return redirect(
                "runs:detail", org_slug=self.organization.slug, project_slug=self.project.slug, run_id=run.pk
            )
        context = {**self.page_context(), "run": run, **scores_panel_context(self, run)}
        context["scores_outcome"] = {"ok": ok, "text": text}
        if form is not None and not ok and form_key in context:
            context[form_key] = form
        return render(self.request, "evals/_run_panel_scores.html", context)


class RunScoreAction(_PanelAction):
    """Score a run with the project's human evaluators, from its page (no queue)."""

    permissions = {"POST": SCORE}

    def post(self, request, org_slug, project_slug, run_id):
        run = run_selectors.run_detail(project=self.project, run_id=run_id)
        form = HumanScoresForm(
            request.POST, evaluators=list(annotations.human_evaluators(project=self.project)), auto_id=PANEL_IDS
        )
        if not form.is_valid():
            text = " ".join(error for errors in form.errors.values() for error in errors)
            return self.answer(run, False, f"Nothing was saved: {text}", form=form, form_key="run_score_form")
        try:
            saved = annotations.submit_scores(
                author=request.user, run=run, scores=form.scores(), comment=form.cleaned_data["comment"], ip=self.ip
            )
        except ServiceError as exc:
            return self.answer(run, False, f"Nothing was saved: {exc.message}.", form=form, form_key="run_score_form")
        given = ", ".join(f"{score.name} {score.value:.2f}" for score in saved)
        return self.answer(run, True, f"Saved your scores ({given}).")


class RunAddToQueueAction(_PanelAction):
    """Add a run to an annotation queue, from its page."""

    permissions = {"POST": Need("work:write", "add runs to annotation queues")}

    def post(self, request, org_slug, project_slug, run_id):
        run = run_selectors.run_detail(project=self.project, run_id=run_id)
        queue_id = request.POST.get("queue", "")
        queue = (
            AnnotationQueue.objects.filter(project=self.project, pk=int(queue_id)).first()
            if queue_id.isdecimal()
            else None
        )
        if queue is None:
            return self.answer(run, False, "Choose an annotation queue of this project.")
        try:
            added = annotations.queue_add_runs(queue=queue, actor=request.user, run_ids=[run.pk], ip=self.ip)
        except ServiceError as exc:
            return self.answer(run, False, f"The run was not added: {exc.message}.")
        text = f"Added to “{queue.name}”." if added else f"The run is in “{queue.name}” already."
        return self.answer(run, True, text)


queue = "annotation-queues/<int:queue_id>"
urlpatterns = [
    path("annotation-queues/", QueuesPage.as_view(), name="queues"),
    path(f"{queue}/", QueueReviewPage.as_view(), name="queue"),
    path(f"{queue}/runs/", QueueAddRunsAction.as_view(), name="queue-add-runs"),
    path("runs/<int:run_id>/score/", RunScoreAction.as_view(), name="run-score"),
    path("runs/<int:run_id>/add-to-queue/", RunAddToQueueAction.as_view(), name="run-add-to-queue"),
]
