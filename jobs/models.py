"""GPU jobs: compute backends an organization configured, jobs submitted to them, each
job's status history, log lines and GPU samples, and the job-scoped tokens evaluation
jobs report with.

State lives here, not in a worker: the poller (``jobs.tasks``) reads a job, asks its
backend, writes what changed, and schedules the next look (``next_poll_at``), so a
worker restart loses nothing.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agentops.crypto import EncryptedTextField
from agentops.scoping import TenantModel

MONEY = {"max_digits": 18, "decimal_places": 9}


class ComputeBackend(TenantModel):
    """Where an organization's jobs run: a kind of backend, its settings, and its
    credentials (encrypted JSON, never shown again)."""

    class Kind(models.TextChoices):
        LOCAL = "local", "Local subprocess"
        RAY = "ray", "Ray Jobs"
        HF_JOBS = "hf_jobs", "Hugging Face Jobs"
        KUBERNETES = "kubernetes", "Kubernetes"
        MODAL = "modal", "Modal"

    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    config = models.JSONField(
        default=dict, blank=True, help_text="Non-secret settings: address, namespace, base URL, app name..."
    )
    credentials_ciphertext = EncryptedTextField(blank=True, help_text="Encrypted JSON of the backend's credentials.")
    credentials_hint = models.CharField(max_length=64, blank=True)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["organization", "name"], name="compute_backend_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class JobSecret(TenantModel):
    """A named secret of the organization that jobs receive as an environment variable;
    encrypted at rest, never shown again once saved."""

    name = models.CharField(max_length=128, help_text="The environment variable's name.")
    value_ciphertext = EncryptedTextField()
    hint = models.CharField(max_length=8, blank=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["organization", "name"], name="job_secret_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Job(TenantModel):
    class Kind(models.TextChoices):
        COMMAND = "command", "Command"
        EVALUATION = "evaluation", "Evaluation"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        SUBMITTED = "submitted", "Submitted"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        LOST = "lost", "Lost"

    ENDED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.LOST)

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="jobs")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.COMMAND)
    backend = models.ForeignKey(ComputeBackend, on_delete=models.PROTECT, related_name="jobs")
    backend_kind = models.CharField(max_length=16, help_text="The backend's kind when submitted.")
    hardware = models.CharField(max_length=32)
    image = models.CharField(max_length=500, blank=True)
    command = models.JSONField(default=list, help_text="The program and its arguments.")
    env = models.JSONField(default=dict, blank=True, help_text="Plain environment variables.")
    secret_names = models.JSONField(default=list, blank=True, help_text="Names of JobSecrets given as variables.")
    time_limit_seconds = models.PositiveIntegerField(default=3600)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    external_id = models.CharField(max_length=300, blank=True, help_text="The backend's id of the job.")
    exit_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    estimated_cost = models.DecimalField(null=True, blank=True, **MONEY)
    estimate = models.JSONField(default=dict, blank=True, help_text="How the estimate was made.")
    cost = models.DecimalField(null=True, blank=True, **MONEY)
    price = models.ForeignKey("billing.Price", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    # Evaluation jobs: the experiment their results land in, and their job-scoped token.
    experiment = models.ForeignKey(
        "evals.Experiment", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    token_hash = models.CharField(max_length=128, blank=True)
    token_expires_at = models.DateTimeField(null=True, blank=True)
    # The poller's bookkeeping.
    next_poll_at = models.DateTimeField(null=True, blank=True)
    poll_interval_seconds = models.FloatField(default=1.0)
    log_cursor = models.JSONField(default=dict, blank=True, help_text="Where the backend's log was read up to.")
    log_line_count = models.PositiveIntegerField(default=0)
    missing_polls = models.PositiveIntegerField(default=0, help_text="Polls in a row the backend did not know it.")
    failed_polls = models.PositiveIntegerField(default=0, help_text="Polls in a row the backend call failed.")
    poll_token = models.CharField(
        max_length=32, blank=True, help_text="The poll chain that owns the job: a stale chain's message is dropped."
    )
    api_key = models.ForeignKey("agentops.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["project", "-created_at"], name="job_recent"),
            models.Index(
                fields=["next_poll_at"],
                condition=Q(status__in=["queued", "submitted", "running"]),
                name="job_to_poll",
            ),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    @property
    def ended(self) -> bool:
        return self.status in self.ENDED

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None:
            return None
        return ((self.ended_at or timezone.now()) - self.started_at).total_seconds()


class JobEvent(TenantModel):
    """One status change of a job, with when and why: the job's timeline."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    status = models.CharField(max_length=16, choices=Job.Status.choices)
    message = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]


class JobLogLine(TenantModel):
    """One line of a job's output, kept in order (``number`` counts from 1)."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_lines")
    number = models.PositiveIntegerField()
    text = models.TextField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "number"], name="job_log_line_unique_number")]
        ordering = ["number"]


class JobMetric(TenantModel):
    """A sample of the job's GPUs (utilisation %, memory MiB), when the backend has them."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metrics")
    at = models.DateTimeField(default=timezone.now)
    gpu_index = models.PositiveSmallIntegerField(default=0)
    utilization_percent = models.FloatField(null=True, blank=True)
    memory_used_mib = models.FloatField(null=True, blank=True)
    memory_total_mib = models.FloatField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["job", "at"], name="job_metric_at")]
        ordering = ["at", "id"]
