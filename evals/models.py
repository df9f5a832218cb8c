"""Datasets (versioned items), evaluators, experiments with their per-item results,
scores, annotation queues and online evaluation rules.

Versions of a dataset are exact without copying items: an item row never changes, it
carries the version that added it and the version that removed it (``None``: still
there). The items of version N are those added at or before N and not removed by N.
Editing an item removes the old row and adds a new one under the same ``key``, so two
experiments on different versions still line up item by item.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agentops.crypto import EncryptedTextField
from agentops.scoping import TenantManager, TenantModel, TenantQuerySet

MONEY = {"max_digits": 18, "decimal_places": 9}


class Dataset(TenantModel):
    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    latest_version = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="dataset_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class DatasetVersion(TenantModel):
    """One immutable state of a dataset; every change to its items makes a new one."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    item_count = models.PositiveIntegerField(default=0)
    note = models.CharField(max_length=500, blank=True, help_text="What changed, e.g. 'imported items.csv'.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["dataset", "number"], name="dataset_version_unique_number")]
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"{self.dataset_id} v{self.number}"


class DatasetItemQuerySet(TenantQuerySet):
    def in_version(self, number: int):
        """The items of version ``number`` of their dataset."""
        return self.filter(added_in__lte=number).filter(Q(removed_in__isnull=True) | Q(removed_in__gt=number))


class DatasetItemManager(TenantManager.from_queryset(DatasetItemQuerySet)):
    pass


class DatasetItem(TenantModel):
    """An input, the expected output (optional) and metadata. Never edited in place."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="items")
    key = models.CharField(max_length=200, help_text="Stable id of the item across versions (given or generated).")
    input = models.JSONField()
    expected = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    source_run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    added_in = models.PositiveIntegerField()
    removed_in = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = DatasetItemManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "key"], condition=Q(removed_in__isnull=True), name="dataset_item_unique_live_key"
            )
        ]
        indexes = [models.Index(fields=["dataset", "added_in"], name="dataset_item_added")]
        ordering = ["id"]

    def __str__(self) -> str:
        return self.key


class Evaluator(TenantModel):
    """A way to score a run: a rule, an LLM judge, a webhook, or people (human)."""

    class Kind(models.TextChoices):
        EXACT_MATCH = "exact_match", "Exact match"
        CONTAINS = "contains", "Contains"
        REGEX = "regex", "Regular expression"
        JSON_VALID = "json_valid", "Valid JSON"
        JSON_SCHEMA = "json_schema", "JSON schema"
        JSON_FIELD = "json_field", "JSON field equals"
        NUMERIC = "numeric", "Numeric within tolerance"
        COST_LIMIT = "cost_limit", "Cost limit"
        LATENCY_LIMIT = "latency_limit", "Latency limit"
        TRAJECTORY = "trajectory", "Trajectory"
        LLM_JUDGE = "llm_judge", "LLM judge"
        WEBHOOK = "webhook", "Webhook"
        HUMAN = "human", "Human"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="evaluators")
    name = models.CharField(max_length=64, help_text="The metric's name on results and leaderboards.")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    description = models.TextField(blank=True)
    config = models.JSONField(default=dict, blank=True)
    pass_threshold = models.FloatField(default=0.5, help_text="A score at or above it passes.")
    secret_ciphertext = EncryptedTextField(blank=True, help_text="Webhook signing secret, encrypted at rest.")
    archived = models.BooleanField(default=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="evaluator_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Experiment(TenantModel):
    """An agent version (or an outside harness) over a dataset version, scored by evaluators."""

    class Kind(models.TextChoices):
        EXECUTED = "executed", "Executed by the platform"
        EXTERNAL = "external", "Reported from outside"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ENDED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="experiments")
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="experiments")
    dataset_version = models.ForeignKey(DatasetVersion, on_delete=models.PROTECT, related_name="experiments")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.EXECUTED)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    agent_version = models.ForeignKey(
        "runs.AgentVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    agent_name = models.CharField(max_length=200, blank=True)
    agent_version_label = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=200, blank=True)
    parameters = models.JSONField(default=dict, blank=True)
    evaluators = models.JSONField(
        default=list, help_text="The evaluators as they were when it started: [{id, name, kind, config, threshold}]."
    )
    concurrency = models.PositiveIntegerField(default=4)
    branch = models.CharField(max_length=200, blank=True, help_text="The code branch, for baselines (e.g. main).")
    commit = models.CharField(max_length=100, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    item_count = models.PositiveIntegerField(default=0)
    completed_count = models.PositiveIntegerField(default=0)
    error_count = models.PositiveIntegerField(default=0)
    total_cost = models.DecimalField(default=0, **MONEY)
    total_tokens = models.BigIntegerField(default=0)
    total_latency_ms = models.BigIntegerField(default=0)
    summary = models.JSONField(
        default=dict, blank=True, help_text="Per metric: mean, ci_low, ci_high, n, pass_rate; and latency p50/p95."
    )
    job = models.BigIntegerField(null=True, blank=True, help_text="The GPU job that reports its results, if any.")
    api_key = models.ForeignKey("agentops.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["project", "-created_at"], name="experiment_recent"),
            models.Index(fields=["dataset", "-created_at"], name="experiment_by_dataset"),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    @property
    def ended(self) -> bool:
        return self.status in self.ENDED


class ExperimentResult(TenantModel):
    """One dataset item in one experiment: its run (executed) or reported output, and state."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        SCORING = "scoring", "Scoring"
        DONE = "done", "Done"
        ERROR = "error", "Error"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="results")
    item = models.ForeignKey(DatasetItem, on_delete=models.PROTECT, related_name="+")
    item_key = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    cost = models.DecimalField(default=0, **MONEY)
    tokens = models.BigIntegerField(default=0)
    latency_ms = models.BigIntegerField(null=True, blank=True)
    scores = models.JSONField(default=dict, blank=True, help_text="metric -> score (0 to 1), copied from Score rows.")
    reported = models.JSONField(
        default=dict, blank=True, help_text="What an outside harness sent beside the output: steps, tool calls."
    )
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now, help_text="When its status last changed.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["experiment", "item"], name="experiment_result_unique_item"),
        ]
        indexes = [
            models.Index(fields=["experiment", "status"], name="experiment_result_status"),
            models.Index(fields=["run"], name="experiment_result_run"),
        ]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.experiment_id}:{self.item_key}"


class Score(TenantModel):
    """A score from 0 to 1 of a run (or of an experiment's result), with where it came
    from: an evaluator in an experiment, an online rule, a person, or an outside harness."""

    class Source(models.TextChoices):
        EXPERIMENT = "experiment", "Experiment"
        ONLINE = "online", "Online evaluation"
        HUMAN = "human", "Human"
        EXTERNAL = "external", "Reported"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="scores")
    result = models.ForeignKey(
        ExperimentResult, null=True, blank=True, on_delete=models.CASCADE, related_name="score_rows"
    )
    evaluator = models.ForeignKey(Evaluator, null=True, blank=True, on_delete=models.SET_NULL, related_name="scores")
    name = models.CharField(max_length=64)
    value = models.FloatField(null=True, blank=True, help_text="0 to 1; empty when the evaluator could not score.")
    passed = models.BooleanField(null=True, blank=True)
    reasoning = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["result", "name"], condition=Q(result__isnull=False), name="score_unique_result_metric"
            ),
            models.UniqueConstraint(
                fields=["run", "name", "author"],
                condition=Q(source="human"),
                name="score_unique_human_per_author",
            ),
            models.UniqueConstraint(
                fields=["run", "name"], condition=Q(source="online"), name="score_unique_online_metric"
            ),
        ]
        indexes = [models.Index(fields=["run", "name"], name="score_run_metric")]
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


class AnnotationQueue(TenantModel):
    """Runs waiting for people to score them with the queue's human evaluators."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="annotation_queues")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    evaluators = models.ManyToManyField(Evaluator, related_name="queues")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="annotation_queue_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class QueueEntry(TenantModel):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DONE = "done", "Done"
        SKIPPED = "skipped", "Skipped"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    queue = models.ForeignKey(AnnotationQueue, on_delete=models.CASCADE, related_name="entries")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    completed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    completed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "run"], name="queue_entry_unique_run")]
        indexes = [models.Index(fields=["queue", "status", "id"], name="queue_entry_next")]
        ordering = ["id"]


class OnlineRule(TenantModel):
    """Score the project's incoming runs with an evaluator, a sampled share of them."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="online_rules")
    evaluator = models.ForeignKey(Evaluator, on_delete=models.CASCADE, related_name="online_rules")
    sampling_rate = models.FloatField(default=1.0, help_text="Share of matching runs scored, 0 to 1.")
    filters = models.JSONField(default=dict, blank=True, help_text="agent_name, environment, tag: runs must match.")
    enabled = models.BooleanField(default=True)
    cursor_at = models.DateTimeField(
        null=True, blank=True, help_text="Runs last changed before this were already considered (with overlap)."
    )
    scored_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.evaluator_id} @ {self.sampling_rate}"


class WandbExport(TenantModel):
    """One run or experiment logged to Weights & Biases: the claim that keeps two workers
    from queueing it twice, and its outcome (the last error, final once the retries are
    spent). See ``evals.services.wandb_export``."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        LOGGED = "logged"
        FAILED = "failed"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    experiment = models.ForeignKey(Experiment, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    logged_at = models.DateTimeField(
        null=True, blank=True, help_text="When the last logging read the data (later scores log it again)."
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run"], condition=Q(run__isnull=False), name="wandb_export_unique_run"),
            models.UniqueConstraint(
                fields=["experiment"], condition=Q(experiment__isnull=False), name="wandb_export_unique_experiment"
            ),
            models.CheckConstraint(
                condition=Q(run__isnull=False, experiment__isnull=True) | Q(run__isnull=True, experiment__isnull=False),
                name="wandb_export_run_or_experiment",
            ),
        ]
        indexes = [models.Index(fields=["project", "status", "-updated_at"], name="wandb_export_status")]
        ordering = ["-updated_at", "-id"]


class WandbCursor(TenantModel):
    """How far the W&B sweep has looked at a project's ended runs and new scores (it looks
    again ``OVERLAP`` before it, like the online rules' cursor)."""

    project = models.OneToOneField("agentops.Project", on_delete=models.CASCADE, related_name="+")
    runs_seen_until = models.DateTimeField()
    scores_seen_until = models.DateTimeField()


# -- exports (evals/bulk_export/, docs/exports.md) -------------------------------------------


class ExportDestination(TenantModel):
    """Where an organization's exports go: a folder under the operator's EXPORT_ROOT, an
    S3-compatible bucket or a Hugging Face Hub account. ``config`` holds the kind's plain
    settings (path; endpoint URL, bucket, prefix, region; Hub endpoint, namespace);
    ``credentials_ciphertext`` the kind's secrets (an access key and its secret; a Hub
    token) as one encrypted JSON object, covered by key rotation.
    Each kind is a class in ``evals.bulk_export.destinations``."""

    class Kind(models.TextChoices):
        FOLDER = "folder", "Folder on the server"
        S3 = "s3", "S3-compatible bucket"
        HF_HUB = "hf_hub", "Hugging Face Hub"

    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    config = models.JSONField(default=dict, blank=True)
    credentials_ciphertext = EncryptedTextField(blank=True, default="")
    credentials_hint = models.CharField(max_length=16, blank=True, help_text="Last characters of the access key.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["organization", "name"], name="export_destination_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ExportSchedule(TenantModel):
    """An export of a project made again every day or week, of the period just ended
    (``evals.tasks.start_due_exports`` starts the due ones)."""

    class Every(models.TextChoices):
        DAY = "day", "Daily"
        WEEK = "week", "Weekly"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="export_schedules")
    destination = models.ForeignKey(ExportDestination, on_delete=models.PROTECT, related_name="schedules")
    kind = models.CharField(max_length=32, default="parquet")
    tables = models.JSONField(default=list, blank=True, help_text="Tables exported; empty: all of them.")
    every = models.CharField(max_length=8, choices=Every.choices)
    # The first day of the next period to export; due once that period has ended.
    next_start = models.DateField()
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["enabled", "next_start"], name="export_schedule_due")]


class ExportJob(TenantModel):
    """One export: what (``kind``: "parquet" is the bulk export of a project's tables),
    of which dates, where to, and how it went: status, progress (rows per table), files
    written, a log, and the failure reason. A retry is a new job (``retry_of``)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    ENDED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="export_jobs")
    kind = models.CharField(max_length=32, default="parquet")
    # A deleted destination leaves its past jobs (not retriable any more) with their label.
    destination = models.ForeignKey(
        ExportDestination, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    destination_label = models.CharField(max_length=200, blank=True)
    schedule = models.ForeignKey(ExportSchedule, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs")
    start_date = models.DateField()
    end_date = models.DateField(help_text="Inclusive: the export covers whole UTC days.")
    tables = models.JSONField(default=list, blank=True)
    options = models.JSONField(
        default=dict, blank=True, help_text="The kind's settings (a Hub push: repository, visibility, what to push)."
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    attempt = models.PositiveIntegerField(default=1)
    retry_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries")
    progress = models.JSONField(default=dict, blank=True, help_text="table -> rows written so far.")
    files = models.JSONField(default=list, blank=True, help_text="[{table, location, rows, bytes}] once written.")
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # A schedule exports each period once, however many sweeps see it due.
            models.UniqueConstraint(
                fields=["schedule", "start_date"],
                condition=Q(schedule__isnull=False, retry_of__isnull=True),
                name="export_job_once_per_period",
            ),
            models.CheckConstraint(condition=Q(end_date__gte=models.F("start_date")), name="export_job_range"),
        ]
        indexes = [models.Index(fields=["project", "-created_at"], name="export_job_project_created")]

    @property
    def ended(self) -> bool:
        return self.status in self.ENDED

    @property
    def rows_written(self) -> int:
        return sum(self.progress.values()) if self.progress else 0

    def __str__(self) -> str:
        return f"export {self.pk} ({self.status})"
