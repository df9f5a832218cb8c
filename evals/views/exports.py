"""Pages of exports: the project's exports (list, a new export, a push to or an import
from the Hugging Face Hub, schedules, and the organization's destinations), and one
export's page with its progress (rows per table, refreshed every 2 seconds by htmx while
it runs), files, log, retry and cancel. The exports page also lists the project's
Weights & Biases logging of runs and experiments (failures first), with a retry of a
failed one (``evals.services.wandb_export``).

Viewers see exports; owners and admins (``export:write``) start, retry, cancel and
schedule them and manage destinations. Every write goes through
``evals.bulk_export.services``, whose errors are shown on the page, never as a 500.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.db.models import Case, IntegerField, Value, When
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import path

from agentops.errors import ServiceError
from agentops.pages import Need, ProjectPage
from evals.bulk_export import services
from evals.bulk_export.kinds import EXPORT_KINDS
from evals.bulk_export.tables import TABLE_NAMES
from evals.hub import HUB_DESTINATION_KIND
from evals.models import Dataset, Experiment, ExportDestination, ExportJob, ExportSchedule, WandbExport
from evals.services.wandb_export import wandb_retry

READ = Need("work:read", "see this project's exports")
WRITE = Need("export:write", "export this project's data")


class ExportForm(forms.Form):
    destination = forms.ChoiceField()
    start_date = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))
    end_date = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}), help_text="Included (UTC days).")
    tables = forms.MultipleChoiceField(
        choices=[(name, name) for name in TABLE_NAMES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: all of them.",
    )

    def __init__(self, *args, destinations, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["destination"].choices = [(str(d.pk), f"{d.name} ({d.get_kind_display()})") for d in destinations]


class ScheduleForm(forms.Form):
    destination = forms.ChoiceField()
    every = forms.ChoiceField(choices=ExportSchedule.Every.choices)

    def __init__(self, *args, destinations, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["destination"].choices = [(str(d.pk), d.name) for d in destinations]


def _names(text: str) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


class HubPushForm(forms.Form):
    kind = forms.ChoiceField(
        label="Push",
        choices=[
            ("hf_dataset", "A dataset version"),
            ("hf_results", "An experiment's results"),
            ("hf_leaderboard", "A dataset's leaderboard"),
        ],
    )
    destination = forms.ChoiceField(label="Hub account")
    repo_id = forms.CharField(
        max_length=200, label="Repository", help_text="namespace/name, or a name in the account's namespace."
    )
    private = forms.BooleanField(required=False, initial=True, label="Private repository")
    dataset = forms.ChoiceField(required=False, help_text="A dataset version or a leaderboard: which dataset.")
    version = forms.IntegerField(required=False, min_value=1, help_text="Empty: the latest.")
    experiment = forms.ChoiceField(required=False, help_text="Results: an ended experiment.")
    split = forms.CharField(required=False, max_length=64, help_text="Empty: test, results or leaderboard.")

    def __init__(self, *args, destinations, datasets, experiments, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["destination"].choices = [(str(d.pk), d.name) for d in destinations]
        self.fields["dataset"].choices = [("", "—"), *((str(d.pk), d.name) for d in datasets)]
        self.fields["experiment"].choices = [("", "—"), *((str(e.pk), e.name) for e in experiments)]

    def options(self) -> dict:
        data = self.cleaned_data
        options = {"repo_id": data["repo_id"], "private": data["private"]}
        if data["split"]:
            options["split"] = data["split"]
        if data["kind"] == "hf_results":
            options["experiment"] = data["experiment"]
        else:
            options["dataset"] = data["dataset"]
        if data["kind"] == "hf_dataset" and data["version"]:
            options["version"] = data["version"]
        return options


class HubImportForm(forms.Form):
    destination = forms.ChoiceField(label="Hub account")
    repo_id = forms.CharField(max_length=200, label="Repository", help_text="namespace/name of a dataset repository.")
    split = forms.CharField(max_length=64, initial="train")
    revision = forms.CharField(required=False, max_length=200, help_text="Branch, tag or commit; empty: main.")
    input_columns = forms.CharField(
        max_length=1000, label="Input column(s)", help_text="One column, or several separated by commas (an object)."
    )
    expected_columns = forms.CharField(required=False, max_length=1000, label="Expected column(s)")
    key_column = forms.CharField(required=False, max_length=200, label="Key column", help_text="Empty: generated.")
    metadata_columns = forms.CharField(
        required=False, max_length=1000, label="Metadata columns", help_text="Separated by commas."
    )
    dataset = forms.ChoiceField(required=False, label="Into dataset", help_text="Its next version.")
    new_dataset = forms.CharField(
        required=False, max_length=100, label="Or a new dataset", help_text="The name of a dataset to create."
    )

    def __init__(self, *args, destinations, datasets, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["destination"].choices = [(str(d.pk), d.name) for d in destinations]
        self.fields["dataset"].choices = [("", "— a new dataset —"), *((str(d.pk), d.name) for d in datasets)]

    def options(self) -> dict:
        data = self.cleaned_data

        def one_or_many(text):
            names = _names(text)
            return names[0] if len(names) == 1 else names

        columns = {"input": one_or_many(data["input_columns"])}
        if _names(data["expected_columns"]):
            columns["expected"] = one_or_many(data["expected_columns"])
        if data["key_column"].strip():
            columns["key"] = data["key_column"].strip()
        if _names(data["metadata_columns"]):
            columns["metadata"] = _names(data["metadata_columns"])
        options = {"repo_id": data["repo_id"], "split": data["split"], "columns": columns}
        if data["revision"]:
            options["revision"] = data["revision"]
        if data["dataset"]:
            options["dataset"] = data["dataset"]
        if data["new_dataset"].strip():
            options["new_dataset"] = data["new_dataset"]
        return options


class DestinationForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=ExportDestination.Kind.choices)
    path = forms.CharField(
        required=False, max_length=500, help_text="Folder: a path inside the server's export folder."
    )
    endpoint_url = forms.CharField(
        required=False,
        max_length=500,
        label="Endpoint URL",
        help_text="S3: empty for AWS. Hugging Face: empty for https://huggingface.co.",
    )
    bucket = forms.CharField(required=False, max_length=63)
    prefix = forms.CharField(required=False, max_length=500)
    region = forms.CharField(required=False, max_length=50)
    access_key_id = forms.CharField(required=False, max_length=200, label="Access key id")
    secret_access_key = forms.CharField(
        required=False, max_length=500, label="Secret access key", widget=forms.PasswordInput
    )
    namespace = forms.CharField(
        required=False, max_length=96, help_text="Hugging Face: the user or organization repositories go to."
    )
    token = forms.CharField(required=False, max_length=500, label="Hugging Face token", widget=forms.PasswordInput)

    def config(self) -> dict:
        data = self.cleaned_data
        if data["kind"] == ExportDestination.Kind.FOLDER:
            return {"path": data["path"]}
        if data["kind"] == ExportDestination.Kind.HF_HUB:
            return {"endpoint": data["endpoint_url"], "namespace": data["namespace"]}
        return {key: data[key] for key in ("endpoint_url", "bucket", "prefix", "region")}

    def credentials(self) -> dict:
        data = self.cleaned_data
        if data["kind"] == ExportDestination.Kind.FOLDER:
            return {}
        if data["kind"] == ExportDestination.Kind.HF_HUB:
            return {"token": data["token"]}
        return {key: data[key] for key in ("access_key_id", "secret_access_key")}


def job_in_project(project, export_id: int) -> ExportJob:
    """The export, looked up in the URL's project: another tenant's is a 404."""
    job = ExportJob.objects.filter(project=project, pk=export_id).first()
    if job is None:
        raise Http404("export not found")
    return job


def described(job: ExportJob) -> ExportJob:
    """The job with ``what``: its kind's words for it (the days, or the Hub repository)."""
    kind = EXPORT_KINDS.get(job.kind)
    job.what = kind.describe(job) if kind else job.kind
    job.is_parquet = job.kind == "parquet"
    return job


def wandb_rows(project, status: str) -> list[WandbExport]:
    """The project's 50 most recently changed W&B loggings, failures first; ``status``
    (one of WandbExport.Status, else all) filters."""
    rows = WandbExport.objects.filter(project=project).select_related("run", "experiment")
    if status in WandbExport.Status.values:
        rows = rows.filter(status=status)
    failed_first = Case(
        When(status=WandbExport.Status.FAILED, then=Value(0)), default=Value(1), output_field=IntegerField()
    )
    return list(rows.order_by(failed_first, "-updated_at", "-id")[:50])


def progress_rows(job: ExportJob) -> list[dict]:
    """One row per table of the export: rows written so far, and done or not."""
    written = {entry["table"]: entry for entry in job.files}
    return [
        {"table": table, "rows": job.progress.get(table), "file": written.get(table)}
        for table in (job.tables or TABLE_NAMES)
    ]


class ExportsPage(ProjectPage):
    """The project's exports and W&B logging; owners and admins start, schedule and
    configure them (``action``: export, schedule, destination, delete-schedule,
    delete-destination, wandb-retry)."""

    permissions = {"GET": READ, "POST": WRITE}

    def get(self, request, org_slug, project_slug):
        return self._render()

    def post(self, request, org_slug, project_slug):
        action = request.POST.get("action", "export")
        destinations, hub_destinations = self._destinations()
        back = redirect("evals:exports", org_slug=org_slug, project_slug=project_slug)
        forms_ = {}
        try:
            if action in ("hub-push", "hub-import"):
                if action == "hub-push":
                    form = HubPushForm(request.POST, **self._hub_choices(hub_destinations))
                    forms_["hub_push_form"] = form
                else:
                    form = HubImportForm(
                        request.POST, destinations=hub_destinations, datasets=self._hub_choices([])["datasets"]
                    )
                    forms_["hub_import_form"] = form
                if form.is_valid():
                    job = services.export_create(
                        project=self.project,
                        actor=request.user,
                        destination_id=int(form.cleaned_data["destination"]),
                        kind=form.cleaned_data.get("kind") or "hf_import",
                        options=form.options(),
                        ip=self.ip,
                    )
                    messages.success(request, f"Job {job.pk} is queued; its page shows the progress.")
                    return redirect("evals:export", org_slug=org_slug, project_slug=project_slug, export_id=job.pk)
            elif action == "export":
                form = ExportForm(request.POST, destinations=destinations)
                forms_["export_form"] = form
                if form.is_valid():
                    job = services.export_create(
                        project=self.project,
                        actor=request.user,
                        destination_id=int(form.cleaned_data["destination"]),
                        start_date=form.cleaned_data["start_date"],
                        end_date=form.cleaned_data["end_date"],
                        tables=form.cleaned_data["tables"],
                        ip=self.ip,
                    )
                    messages.success(request, f"Export {job.pk} is queued; its page shows the progress.")
                    return redirect("evals:export", org_slug=org_slug, project_slug=project_slug, export_id=job.pk)
            elif action == "schedule":
                form = ScheduleForm(request.POST, destinations=destinations)
                forms_["schedule_form"] = form
                if form.is_valid():
                    services.schedule_create(
                        project=self.project,
                        actor=request.user,
                        destination_id=int(form.cleaned_data["destination"]),
                        every=form.cleaned_data["every"],
                        ip=self.ip,
                    )
                    messages.success(request, "The schedule is saved: each period is exported once it has ended.")
                    return back
            elif action == "destination":
                form = DestinationForm(request.POST)
                forms_["destination_form"] = form
                if form.is_valid():
                    services.destination_create(
                        organization=self.organization,
                        actor=request.user,
                        name=form.cleaned_data["name"],
                        kind=form.cleaned_data["kind"],
                        config=form.config(),
                        credentials=form.credentials(),
                        ip=self.ip,
                    )
                    messages.success(request, "The destination is saved.")
                    return back
            elif action == "delete-schedule":
                schedule = ExportSchedule.objects.filter(project=self.project, pk=request.POST.get("id") or 0).first()
                if schedule is None:
                    raise Http404("schedule not found")
                services.schedule_delete(schedule=schedule, actor=request.user, ip=self.ip)
                messages.success(request, "The schedule is deleted; its exports stay.")
                return back
            elif action == "wandb-retry":
                export = WandbExport.objects.filter(project=self.project, pk=request.POST.get("id") or 0).first()
                if export is None:
                    raise Http404("W&B logging not found")
                wandb_retry(export=export, actor=request.user, ip=self.ip)
                messages.success(request, "Queued for W&B again; this page shows how it went.")
                return redirect(f"{back.url}#wandb")
            elif action == "delete-destination":
                destination = ExportDestination.objects.filter(pk=request.POST.get("id") or 0).first()
                if destination is None:
                    raise Http404("destination not found")
                services.destination_delete(destination=destination, actor=request.user, ip=self.ip)
                messages.success(request, "The destination is deleted.")
                return back
            else:
                messages.error(request, f"Unknown action {action!r}.")
                return back
        except ServiceError as exc:
            form = next(iter(forms_.values()), None)
            if form is None:
                messages.error(request, exc.message)
                return back
            form.add_error(None, exc.message)
            return self._render(status=exc.status, **forms_)
        return self._render(status=400, **forms_)

    @staticmethod
    def _destinations() -> tuple[list[ExportDestination], list[ExportDestination]]:
        """The destinations files go to (folder, S3) and the Hugging Face Hub accounts."""
        every = list(ExportDestination.objects.all())
        return (
            [d for d in every if d.kind != HUB_DESTINATION_KIND],
            [d for d in every if d.kind == HUB_DESTINATION_KIND],
        )

    def _hub_choices(self, hub_destinations) -> dict:
        return {
            "destinations": hub_destinations,
            "datasets": list(Dataset.objects.filter(project=self.project).order_by("name")),
            "experiments": list(
                Experiment.objects.filter(project=self.project, status__in=Experiment.ENDED).order_by("-created_at")[
                    :200
                ]
            ),
        }

    def _render(self, *, status: int = 200, **forms_) -> HttpResponse:
        destinations, hub_destinations = self._destinations()
        choices = self._hub_choices(hub_destinations)
        context = {
            "jobs": [
                described(job)
                for job in ExportJob.objects.filter(project=self.project).order_by("-created_at", "-id")[:50]
            ],
            "schedules": ExportSchedule.objects.filter(project=self.project).select_related("destination"),
            "wandb_status": self.request.GET.get("wandb", ""),
            "wandb_statuses": WandbExport.Status.values,
            "wandb_exports": wandb_rows(self.project, self.request.GET.get("wandb", "")),
            "destinations": destinations + hub_destinations,
            "file_destinations": destinations,
            "hub_destinations": hub_destinations,
            "export_form": ExportForm(destinations=destinations),
            "schedule_form": ScheduleForm(destinations=destinations),
            "hub_push_form": HubPushForm(**choices),
            "hub_import_form": HubImportForm(destinations=hub_destinations, datasets=choices["datasets"]),
            "destination_form": DestinationForm(),
            **forms_,
        }
        return self.render_page("evals/exports.html", context, status=status)


class ExportPage(ProjectPage):
    """One export; owners and admins retry (``action=retry``) or cancel it."""

    permissions = {"GET": READ, "POST": WRITE}

    def get(self, request, org_slug, project_slug, export_id):
        job = described(job_in_project(self.project, export_id))
        return self.render_page("evals/export.html", {"job": job, "rows": progress_rows(job)})

    def post(self, request, org_slug, project_slug, export_id):
        job = job_in_project(self.project, export_id)
        action = request.POST.get("action")
        try:
            if action == "retry":
                retry = services.export_retry(job=job, actor=request.user, ip=self.ip)
                messages.success(request, f"Export {retry.pk} is attempt {retry.attempt} of this export.")
                return redirect("evals:export", org_slug=org_slug, project_slug=project_slug, export_id=retry.pk)
            if action == "cancel":
                services.export_cancel(job=job, actor=request.user, ip=self.ip)
                messages.success(request, "The export is cancelled (a running one stops after its current chunk).")
            else:
                messages.error(request, f"Unknown action {action!r}.")
        except ServiceError as exc:
            messages.error(request, exc.message)
        return redirect("evals:export", org_slug=org_slug, project_slug=project_slug, export_id=job.pk)


class ExportProgressFragment(ProjectPage):
    """The progress block of an export page, polled while the export runs."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, export_id):
        job = job_in_project(self.project, export_id)
        return self.render_page("evals/_export_progress.html", {"job": job, "rows": progress_rows(job)})


urlpatterns = [
    path("exports/", ExportsPage.as_view(), name="exports"),
    path("exports/<int:export_id>/", ExportPage.as_view(), name="export"),
    path("exports/<int:export_id>/progress/", ExportProgressFragment.as_view(), name="export-progress"),
]
