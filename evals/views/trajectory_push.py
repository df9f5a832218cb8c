""" "Push trajectory to the Hugging Face Hub" on a run's page (in its evaluations panel,
which evals serves, so runs needs no import of evals) and for an interactive session:
an ``hf_trajectory`` export job (``evals.bulk_export.hub_trajectory``) of the run, or of
the session the run is a turn of. The job's page then shows its status, log and retry.

Owners and admins (``export:write``, as every export) start it, to one of the
organization's Hugging Face destinations (the named secret holding the token).
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect
from django.urls import path

from agentops.errors import ServiceError
from agentops.pages import Need, ProjectPage
from evals.bulk_export import services
from evals.hub import HUB_DESTINATION_KIND
from evals.models import ExportDestination
from runs import selectors as run_selectors
from runs.services.sessions import session_get

KIND = "hf_trajectory"
WRITE = Need("export:write", "push trajectories to the Hugging Face Hub")


class TrajectoryPushForm(forms.Form):
    subject = forms.ChoiceField(
        choices=[("run", "This run"), ("session", "Its whole session")], initial="run", required=False
    )
    destination = forms.ChoiceField(label="Hugging Face account")
    repo_id = forms.CharField(
        max_length=200, label="Dataset repository", help_text="namespace/name, or a name in the account's namespace"
    )
    private = forms.BooleanField(required=False, initial=True, label="Private (when the repository is created)")

    def __init__(self, *args, destinations, session: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["destination"].choices = [(str(d.pk), d.name) for d in destinations]
        if not session:
            del self.fields["subject"]


def _hub_destinations() -> list[ExportDestination]:
    return list(ExportDestination.objects.filter(kind=HUB_DESTINATION_KIND).order_by("name"))


def trajectory_panel_context(page, run) -> dict:
    """Context of templates/evals/_run_panel_trajectory.html: the push form, for those
    who may export, when the organization has a Hugging Face destination."""
    if not page.access.allows("export:write"):
        return {}
    destinations = _hub_destinations()
    if not destinations:
        return {"trajectory_push_setup": True}
    return {
        "trajectory_push_form": TrajectoryPushForm(destinations=destinations, session=run.agent_session_id is not None)
    }


class TrajectoryPushAction(ProjectPage):
    """Queue the push (``runs/<run_id>/push-trajectory/``: the run, or with ``subject=session``
    the session it is a turn of; ``agent-sessions/<session_id>/push-trajectory/``: the
    session). Success goes to the export's page; a refusal back, saying why."""

    permissions = {"POST": WRITE}

    def post(self, request, org_slug, project_slug, run_id=None, session_id=None):
        if run_id is not None:
            run = run_selectors.run_detail(project=self.project, run_id=run_id)
            back = redirect("runs:detail", org_slug=org_slug, project_slug=project_slug, run_id=run.pk)
            form = TrajectoryPushForm(
                request.POST, destinations=_hub_destinations(), session=bool(run.agent_session_id)
            )
            subject = {"run": run.pk}
            if form.is_valid() and form.cleaned_data.get("subject") == "session":
                subject = {"session": run.agent_session_id}
        else:
            session = session_get(project=self.project, session_id=session_id)
            back = redirect("evals:exports", org_slug=org_slug, project_slug=project_slug)
            form = TrajectoryPushForm(request.POST, destinations=_hub_destinations(), session=False)
            subject = {"session": session.pk}
        if not form.is_valid():
            errors = " ".join(error for errors in form.errors.values() for error in errors)
            messages.error(request, f"Nothing was pushed: {errors}")
            return back
        try:
            job = services.export_create(
                project=self.project,
                actor=request.user,
                destination_id=int(form.cleaned_data["destination"]),
                kind=KIND,
                options={"repo_id": form.cleaned_data["repo_id"], "private": form.cleaned_data["private"], **subject},
                ip=self.ip,
            )
        except ServiceError as exc:
            messages.error(request, f"Nothing was pushed: {exc.message}")
            return back
        messages.success(request, f"Export {job.pk} is queued: it pushes the trajectory to the Hub.")
        return redirect("evals:export", org_slug=org_slug, project_slug=project_slug, export_id=job.pk)


urlpatterns = [
    path("runs/<int:run_id>/push-trajectory/", TrajectoryPushAction.as_view(), name="trajectory-push-run"),
    path(
        "agent-sessions/<int:session_id>/push-trajectory/",
        TrajectoryPushAction.as_view(),
        name="trajectory-push-session",
    ),
]
