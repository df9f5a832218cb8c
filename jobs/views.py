"""Pages of GPU jobs: the project's jobs (filtered by status, rows refreshed live), a new
job with its cost estimate before it is submitted, one job (its facts, the status block
with the timeline, a live log tail, the full log, a GPU chart, cancelling), and the
organization's compute settings (backends and job secrets, admins only).

Every write goes through one service of ``jobs.services``, whose errors are shown on the
form or as a message, never as a 500. Jobs are looked up in the URL's project and
backends and secrets in the URL's organization, so another tenant's id is a 404 like a
missing one. The status block and the log lines are templates of their own because
``jobs.live`` renders the same two when a job changes: they may use only the job, its
project and organization (no request, no permissions).
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.core.handlers.asgi import ASGIRequest
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from agentops import live
from agentops.downloads import streaming_body
from agentops.errors import ServiceError
from agentops.pages import Need, OrganizationPage, ProjectPage
from billing.carbon import job_footprint
from evals.models import DatasetItem
from jobs import services
from jobs.forms import BackendForm, BackendUpdateForm, JobForm, JobSecretForm
from jobs.models import ComputeBackend, Job, JobLogLine, JobMetric, JobSecret

READ = Need("work:read", "see this project's jobs")
WRITE = Need("work:write", "submit and cancel jobs")
SETTINGS_READ = Need("secret:read", "see the compute backends and job secrets")
SETTINGS_WRITE = Need("secret:write", "change the compute backends and job secrets")
TAIL_LINES = 500
JOBS_PER_PAGE = 50
FULL_LOG_BATCH = 5000
# The fields an estimate reads: errors in the others don't stop it.
ESTIMATE_FIELDS = (
    "backend",
    "hardware",
    "time_limit_minutes",
    "kind",
    "dataset",
    "dataset_version",
    "seconds_per_item",
)


def job_in_project(project, job_id: int) -> Job:
    """The job, looked up in the URL's project: another tenant's is a 404, like a missing one."""
    job = (
        Job.objects.select_related("backend", "experiment", "created_by", "project__organization")
        .filter(project=project, pk=job_id)
        .first()
    )
    if job is None:
        raise Http404("job not found")
    return job


def log_tail(job: Job) -> list[JobLogLine]:
    return list(JobLogLine.objects.filter(job=job, number__gt=job.log_line_count - TAIL_LINES).order_by("number"))


def _page_number(request) -> str:
    value = request.GET.get("page", "1")
    return value if value.isdecimal() else "1"


# -- the jobs list --------------------------------------------------------------------------


class JobFilterForm(forms.Form):
    status = forms.ChoiceField(label="Status", required=False, choices=[("", "Any status"), *Job.Status.choices])
    kind = forms.ChoiceField(label="Kind", required=False, choices=[("", "Any kind"), *Job.Kind.choices])

    def filters(self) -> dict:
        if not self.is_valid():
            return {}
        return {key: value for key, value in self.cleaned_data.items() if value}


class JobsIndexPage(ProjectPage):
    """The project's jobs, newest first, filtered by status and kind; a row is replaced
    when its job's status changes (the page hears its rows' topics, jobs/live.py)."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug):
        filters = JobFilterForm(request.GET)
        queryset = Job.objects.filter(project=self.project, **filters.filters()).select_related("backend")
        page = Paginator(queryset, JOBS_PER_PAGE).get_page(_page_number(request))
        query = {key: value for key, value in request.GET.items() if key != "page" and value}
        return self.render_page(
            "jobs/index.html",
            {
                "jobs": page,
                "filters": filters,
                "filtered": bool(query),
                "page_query": urlencode(query),
                "any_jobs": bool(query) or page.paginator.count > 0,
            },
            live_topics=[live.topic("job-row", job.pk) for job in page],
        )


class JobRowFragment(ProjectPage):
    """One row of the list, re-fetched by the list page when its job changes."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, job_id):
        job = job_in_project(self.project, job_id)
        return render(request, "jobs/_row.html", {**self.page_context(), "job": job})


# -- a new job and its estimate --------------------------------------------------------------


def estimate_for(form: JobForm, project) -> dict | None:
    """The estimate of what the form describes, or None while it is not complete enough
    (a backend and hardware, a time limit; an evaluation's items when it has a dataset)."""
    data = form.cleaned_data
    backend, hardware, minutes = data.get("backend"), data.get("hardware"), data.get("time_limit_minutes")
    if backend is None or not hardware or not minutes:
        return None
    items = None
    if data.get("kind") == Job.Kind.EVALUATION and data.get("dataset") is not None:
        dataset = data["dataset"]
        number = data.get("dataset_version") or dataset.latest_version
        items = DatasetItem.objects.filter(dataset=dataset).in_version(number).count()
    return services.estimate(
        project=project,
        backend=backend,
        hardware=hardware,
        time_limit_seconds=minutes * 60,
        items=items,
        seconds_per_item=data.get("seconds_per_item") if items else None,
    )


class NewJobPage(ProjectPage):
    """The form of a new job, with its estimate; submitting opens the job's page, where
    its log arrives live."""

    permissions = {"GET": WRITE, "POST": WRITE}

    def get(self, request, org_slug, project_slug):
        form = JobForm(project=self.project)
        estimate = None
        if form.chosen_backend is not None:
            # What the form's first choices would cost, before anything is changed.
            estimate = services.estimate(
                project=self.project,
                backend=form.chosen_backend,
                hardware=form.fields["hardware"].choices[0][0],
                time_limit_seconds=form.fields["time_limit_minutes"].initial * 60,
            )
        return self.render_form(form, estimate=estimate)

    def post(self, request, org_slug, project_slug):
        form = JobForm(request.POST, project=self.project)
        if not form.is_valid():
            return self.render_form(form, status=400)
        try:
            job = services.job_submit(project=self.project, actor=request.user, ip=self.ip, **form.submission())
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self.render_form(form, status=exc.status)
        messages.success(request, "Job submitted: it starts as soon as the backend takes it.")
        return redirect("jobs:detail", org_slug=org_slug, project_slug=project_slug, job_id=job.pk)

    def render_form(self, form: JobForm, *, status: int = 200, estimate: dict | None = None) -> HttpResponse:
        if estimate is None and form.is_bound and form.is_valid():
            estimate = estimate_for(form, self.project)
        return self.render_page(
            "jobs/new.html",
            {
                "form": form,
                "estimate": estimate,
                "has_backends": form.fields["backend"].queryset.exists(),
            },
            status=status,
        )


class JobEstimateFragment(NewJobPage):
    """What the job in the form would cost (``jobs.services.estimate``), asked by the form
    on every change (htmx), or by its Estimate button without JavaScript. Estimating
    reads only, like the API's estimate, so it needs no more than reading jobs."""

    permissions = {"POST": READ}

    def post(self, request, org_slug, project_slug):
        form = JobForm(request.POST, project=self.project, complete=False)
        form.is_valid()  # the estimate needs only the fields it uses: errors elsewhere don't matter yet
        form_errors = {name: errors for name, errors in form.errors.items() if name in ESTIMATE_FIELDS}
        estimate = None if form_errors else estimate_for(form, self.project)
        if not request.htmx:
            return self.render_form(form, estimate=estimate, status=200 if estimate is not None else 400)
        return render(
            request,
            "jobs/_estimate.html",
            {**self.page_context(), "form": form, "estimate": estimate, "estimate_errors": form_errors, "oob": True},
        )


# -- one job ---------------------------------------------------------------------------------


def gpu_chart(job: Job) -> dict:
    """The job's GPU samples as one series per GPU: times, utilisation %, memory MiB."""
    series: dict[int, dict] = {}
    rows = (
        JobMetric.objects.filter(job=job)
        .order_by("at", "id")
        .values_list("gpu_index", "at", "utilization_percent", "memory_used_mib", "memory_total_mib")
    )
    for gpu_index, at, utilization, memory_used, memory_total in rows:
        gpu = series.setdefault(
            gpu_index, {"gpu": gpu_index, "at": [], "utilization": [], "memory": [], "memory_total": None}
        )
        gpu["at"].append(at.isoformat())
        gpu["utilization"].append(utilization)
        gpu["memory"].append(memory_used)
        if memory_total is not None:
            gpu["memory_total"] = memory_total
    return {"gpus": [series[index] for index in sorted(series)], "ended": job.ended}


class JobPage(ProjectPage):
    """A job: what it runs, its status block (status, cost, the timeline), its log tail
    (new lines appended live), its GPUs' chart; members cancel it while it runs."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, job_id):
        job = job_in_project(self.project, job_id)
        kwargs = {"org_slug": org_slug, "project_slug": project_slug, "job_id": job.pk}
        return self.render_page(
            "jobs/detail.html",
            {
                "job": job,
                "footprint": job_footprint(job.pk),
                "lines": log_tail(job),
                "tail_lines": TAIL_LINES,
                "chart": gpu_chart(job),
                "env": sorted(job.env.items()),
                "urls": {
                    "live": reverse("jobs:live", kwargs=kwargs),
                    "log": reverse("jobs:log", kwargs=kwargs),
                    "metrics": reverse("jobs:metrics", kwargs=kwargs),
                    "cancel": reverse("jobs:cancel", kwargs=kwargs),
                },
            },
            live_topics=[live.topic("job", job.pk)],
        )


class JobLiveFragment(ProjectPage):
    """The status block and the log tail, both swapped out of band: what an open page
    fetches when its socket (re)opens, since updates sent while it had none reached nobody."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, job_id):
        job = job_in_project(self.project, job_id)
        return render(
            request,
            "jobs/_live.html",
            {
                **self.page_context(),
                "job": job,
                "footprint": job_footprint(job.pk),
                "lines": log_tail(job),
                "oob": True,
            },
        )


class JobMetricsView(ProjectPage):
    """The GPU chart's data as JSON: the page redraws it while the job runs."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, job_id):
        return JsonResponse(gpu_chart(job_in_project(self.project, job_id)))


def _log_text(job_id: int):
    """Every line of the job's log, read in batches by line number (each batch a short
    query inside the organization's scope: no cursor held open across the download)."""
    after = 0
    while True:
        batch = list(
            JobLogLine.objects.filter(job_id=job_id, number__gt=after)
            .order_by("number")
            .values_list("number", "text")[:FULL_LOG_BATCH]
        )
        if not batch:
            return
        for _number, text in batch:
            yield text + "\n"
        after = batch[-1][0]


class JobLogView(ProjectPage):
    """The job's whole log as plain text (``?download=1`` saves it as a file)."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, job_id):
        job = job_in_project(self.project, job_id)
        response = StreamingHttpResponse(
            streaming_body(
                _log_text(job.pk), organization=self.organization, asynchronous=isinstance(request, ASGIRequest)
            ),
            content_type="text/plain; charset=utf-8",
        )
        disposition = "attachment" if request.GET.get("download") else "inline"
        response["Content-Disposition"] = f'{disposition}; filename="job-{job.pk}.log"'
        response["Cache-Control"] = "no-store"
        # A log is whatever the job printed: never let a browser sniff it into HTML.
        response["X-Content-Type-Options"] = "nosniff"
        return response


class JobCancelAction(ProjectPage):
    """Cancel a job: a queued one ends at once, a running one within seconds."""

    permissions = {"POST": WRITE}

    def post(self, request, org_slug, project_slug, job_id):
        job = job_in_project(self.project, job_id)
        try:
            services.job_cancel(job=job, actor=request.user, ip=self.ip)
        except ServiceError as exc:
            messages.error(request, f"The job could not be cancelled: {exc.message}.")
        else:
            messages.success(request, "Cancelling: the backend is told to stop the job.")
        return redirect("jobs:detail", org_slug=org_slug, project_slug=project_slug, job_id=job.pk)


# -- the organization's compute settings -------------------------------------------------------


def config_json(value) -> str:
    return json.dumps(value or {}, indent=2, sort_keys=True)


def backend_in_organization(organization, backend_id: int) -> ComputeBackend:
    backend = ComputeBackend.objects.filter(organization=organization, pk=backend_id).first()
    if backend is None:
        raise Http404("backend not found")
    return backend


class ComputeSettingsPage(OrganizationPage):
    """The organization's compute backends (where jobs run) and job secrets (what jobs
    receive as variables). Credentials and secret values are never shown again."""

    permissions = {"GET": SETTINGS_READ}

    def get(self, request, org_slug):
        return self.render_settings()

    def render_settings(
        self,
        *,
        backend_form: BackendForm | None = None,
        secret_form: JobSecretForm | None = None,
        update_forms: dict[int, BackendUpdateForm] | None = None,
        status: int = 200,
    ) -> HttpResponse:
        backends = list(ComputeBackend.objects.filter(organization=self.organization).order_by("name"))
        update_forms = update_forms or {}
        rows = [
            {
                "backend": backend,
                "form": update_forms.get(backend.pk)
                or BackendUpdateForm(initial={"config": config_json(backend.config)}, prefix=f"backend-{backend.pk}"),
                "config": config_json(backend.config),
                "open": backend.pk in update_forms,
            }
            for backend in backends
        ]
        return self.render_page(
            "jobs/compute_settings.html",
            {
                "rows": rows,
                "secrets": list(JobSecret.objects.filter(organization=self.organization).select_related("updated_by")),
                "backend_form": backend_form or BackendForm(),
                "secret_form": secret_form or JobSecretForm(),
                "kinds": ComputeBackend.Kind.choices,
            },
            status=status,
        )


class BackendCreateAction(ComputeSettingsPage):
    permissions = {"POST": SETTINGS_WRITE}

    def post(self, request, org_slug):
        form = BackendForm(request.POST)
        if form.is_valid():
            try:
                backend = services.backend_create(
                    organization=self.organization, actor=request.user, ip=self.ip, **form.cleaned_data
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
                return self.render_settings(backend_form=form, status=exc.status)
            messages.success(request, f"The backend “{backend.name}” was added.")
            return redirect(reverse("jobs_org:index", args=[org_slug]) + "#backends")
        return self.render_settings(backend_form=form, status=400)


class BackendUpdateAction(ComputeSettingsPage):
    """Change a backend's settings or replace its credentials (blank keeps them)."""

    permissions = {"POST": SETTINGS_WRITE}

    def post(self, request, org_slug, backend_id):
        backend = backend_in_organization(self.organization, backend_id)
        form = BackendUpdateForm(request.POST, prefix=f"backend-{backend.pk}")
        if form.is_valid():
            try:
                services.backend_update(
                    backend=backend,
                    actor=request.user,
                    config=form.cleaned_data["config"],
                    credentials=form.cleaned_data["credentials"],
                    ip=self.ip,
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
                return self.render_settings(update_forms={backend.pk: form}, status=exc.status)
            messages.success(request, f"The backend “{backend.name}” was saved.")
            return redirect(reverse("jobs_org:index", args=[org_slug]) + "#backends")
        return self.render_settings(update_forms={backend.pk: form}, status=400)


class BackendEnableAction(ComputeSettingsPage):
    """Turn a backend on or off (``enabled`` = "1" or "0"): a backend turned off takes no
    new jobs; the ones it runs go on."""

    permissions = {"POST": SETTINGS_WRITE}

    def post(self, request, org_slug, backend_id):
        backend = backend_in_organization(self.organization, backend_id)
        enabled = request.POST.get("enabled") == "1"
        try:
            services.backend_update(backend=backend, actor=request.user, enabled=enabled, ip=self.ip)
        except ServiceError as exc:
            messages.error(request, f"Could not change {backend.name}: {exc.message}.")
        else:
            messages.success(request, f"The backend “{backend.name}” is {'on' if enabled else 'off'}.")
        return redirect(reverse("jobs_org:index", args=[org_slug]) + "#backends")


class JobSecretSetAction(ComputeSettingsPage):
    permissions = {"POST": SETTINGS_WRITE}

    def post(self, request, org_slug):
        form = JobSecretForm(request.POST)
        if form.is_valid():
            try:
                secret = services.secret_set(
                    organization=self.organization,
                    actor=request.user,
                    name=form.cleaned_data["name"].strip(),
                    value=form.cleaned_data["value"],
                    ip=self.ip,
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
                return self.render_settings(secret_form=form, status=exc.status)
            messages.success(request, f"The secret {secret.name} was saved.")
            return redirect(reverse("jobs_org:index", args=[org_slug]) + "#job-secrets")
        return self.render_settings(secret_form=form, status=400)


class JobSecretDeleteAction(ComputeSettingsPage):
    permissions = {"POST": SETTINGS_WRITE}

    def post(self, request, org_slug, name):
        try:
            services.secret_delete(organization=self.organization, actor=request.user, name=name, ip=self.ip)
        except ServiceError as exc:
            if exc.status == 404:
                raise Http404(exc.message) from None
            messages.error(request, f"Could not delete {name}: {exc.message}.")
        else:
            messages.success(request, f"The secret {name} was deleted; jobs submitted from now on cannot use it.")
        return redirect(reverse("jobs_org:index", args=[org_slug]) + "#job-secrets")
