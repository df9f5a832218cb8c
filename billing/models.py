"""Billing: the versioned price catalog, the usage ledger, budgets and their alerts, and
the audited cost recomputations.

- ``Price``: one version of one price. LLM tokens (per million input, cached input and
  output tokens), tool units (per call, character or second) and GPU hours (per hardware
  type, optionally per backend). A price is found by its pattern (exact name, prefix or
  regular expression, with a priority); changing a price adds a version with a later
  ``effective_from`` and old versions stay. An organization's negotiated prices
  (``organization`` set) win over the public ones. Drafts are never used for costing,
  only to preview a recompute.
- ``UsageDaily``: the ledger, per day, organization, project, agent, model, API key and
  end user, maintained incrementally from ``RunUsage`` (each run's own contribution) and
  ``ComputeUsage`` (each GPU job's, per day) so billing pages never scan raw steps, and a
  run or job deleted later keeps its cost.
- ``Budget`` / ``BudgetAlert``: spend limits and every alert raised.
- ``EvaluationUsage``: one LLM-judge call of an evaluator, written by evals through
  ``billing.ledger.evaluation_usage_record``; it counts in the ledger as category
  ``evaluation``.
- ``EnergyFactor``: the versioned carbon catalog (Wh per token of a model, watts of a
  GPU board, grams of CO2e per kWh of a backend's grid), each row with its source.
- ``CostRevision`` / ``StepCostChange``: a recompute applied by staff, keeping old amounts.

Every ledger row has a ``category`` (``Category``): LLM calls, tools (with their price
unit), GPU jobs and evaluation (judge calls); budgets count all of them.
"""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from agentops.crypto import EncryptedTextField
from agentops.scoping import TenantModel

MONEY = {"max_digits": 18, "decimal_places": 9}


class Category(models.TextChoices):
    """What a ledger row's spend is for."""

    LLM = "llm", "LLM calls"
    TOOL = "tool", "Tools"
    GPU = "gpu", "GPU jobs"
    EVALUATION = "evaluation", "Evaluation"


def _category_field():
    return models.CharField(max_length=12, choices=Category.choices, default=Category.LLM)


def _unit_field():
    return models.CharField(
        max_length=16, blank=True, help_text="What the spend is counted in: token, call, character, second, hour."
    )


RATE = {"max_digits": 14, "decimal_places": 6}


class Price(models.Model):
    """One version of one price (see the module docstring)."""

    class Kind(models.TextChoices):
        LLM = "llm", "LLM tokens"
        TOOL = "tool", "Tool units"
        GPU = "gpu", "GPU hours"

    class Match(models.TextChoices):
        EXACT = "exact", "Exact name"
        PREFIX = "prefix", "Name prefix"
        REGEX = "regex", "Regular expression"

    class Unit(models.TextChoices):
        CALL = "call", "per call"
        CHARACTER = "character", "per character"
        SECOND = "second", "per second"

    class Status(models.TextChoices):
        PUBLISHED = "published", "Published"
        DRAFT = "draft", "Draft (only for recompute previews)"

    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.LLM)
    pattern = models.CharField(max_length=200, help_text="Model, tool or hardware name, prefix or regular expression.")
    match = models.CharField(max_length=8, choices=Match.choices, default=Match.EXACT)
    priority = models.IntegerField(
        default=0, help_text="Higher wins when several patterns match; exact names win over prefixes and regexes."
    )
    provider = models.CharField(max_length=64, blank=True, help_text="Model provider, or the GPU backend.")
    organization = models.ForeignKey(
        "agentops.Organization",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="negotiated_prices",
        help_text="Set: this organization's negotiated price, which wins over the public ones.",
    )
    # LLM tokens, in the currency per million tokens.
    # Each part of a call at its own rate: cached input (cache reads), cache writes and
    # reasoning output default to the input and output rates when empty.
    input_per_million = models.DecimalField(null=True, blank=True, **RATE)
    cached_input_per_million = models.DecimalField(null=True, blank=True, **RATE)
    cache_write_per_million = models.DecimalField(null=True, blank=True, **RATE)
    output_per_million = models.DecimalField(null=True, blank=True, **RATE)
    reasoning_output_per_million = models.DecimalField(null=True, blank=True, **RATE)
    tiers = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            'Long-context tiers: [{"above_input_tokens": 200000, "input_per_million": "6", ...}]. A call with '
            "more input tokens than a tier's threshold is priced wholly at that tier's rates (the highest "
            "threshold it exceeds); a rate a tier leaves out is the base one."
        ),
    )
    # Tool units.
    unit = models.CharField(max_length=16, choices=Unit.choices, blank=True)
    unit_price = models.DecimalField(null=True, blank=True, **RATE)
    # GPU hours.
    hourly = models.DecimalField(null=True, blank=True, **RATE)
    currency = models.CharField(max_length=3, default="USD")
    source = models.CharField(max_length=300, blank=True, help_text="Where the price was read, and when.")
    effective_from = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PUBLISHED)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["kind", "-priority", "pattern", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "organization", "pattern", "match", "provider", "effective_from"],
                condition=models.Q(status="published"),
                nulls_distinct=False,
                name="price_version_unique",
            )
        ]
        indexes = [models.Index(fields=["kind", "status"])]

    def __str__(self) -> str:
        owner = f" for {self.organization}" if self.organization_id else ""
        return f"{self.get_kind_display()}: {self.pattern} ({self.match}){owner} from {self.effective_from:%Y-%m-%d}"

    def clean(self) -> None:
        from billing.services import check_tiers

        check_tiers(self.tiers)


class BillingSettings(TenantModel):
    """An organization's billing choices (one row, created when first changed)."""

    class BudgetCost(models.TextChoices):
        COMPUTED = "computed", "Computed by the platform from the price catalog"
        REPORTED = "reported", "Reported by the client (computed where none was reported)"

    organization = models.OneToOneField(
        "agentops.Organization", on_delete=models.CASCADE, related_name="billing_settings"
    )
    budget_cost = models.CharField(
        max_length=8,
        choices=BudgetCost.choices,
        default=BudgetCost.COMPUTED,
        help_text="Which cost the ledger, and so budgets and alerts, count.",
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "billing settings"

    def __str__(self) -> str:
        return f"billing settings of {self.organization}"


class LedgerRow(TenantModel):
    """What a row of the ledger holds, a run's contribution (``RunUsage``) as the daily
    rollup (``UsageDaily``): its dimensions (``billing.ledger.DIMENSIONS``) and the
    measures summed over them (``billing.ledger.MEASURES``; ``steps`` and
    ``unpriced_steps`` are declared by each, a day's counts being wider than a run's)."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    agent_name = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    api_key = models.ForeignKey("agentops.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    end_user_id = models.CharField(max_length=200, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(default=0, **MONEY)
    category = _category_field()
    unit = _unit_field()
    reported_cost = models.DecimalField(default=0, **MONEY)
    reported_computed_cost = models.DecimalField(default=0, **MONEY)

    class Meta:
        abstract = True


class RunUsage(LedgerRow):
    """One run's contribution to the ledger, per day and model: recomputed from the run's
    steps whenever the run changes, the difference applied to ``UsageDaily``. ``run_id``
    is not a foreign key: the ledger keeps a run's cost after retention deletes it."""

    run_id = models.BigIntegerField()
    steps = models.IntegerField(default=0)
    unpriced_steps = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run_id", "day", "model", "category", "unit"], name="run_usage_unique")
        ]


class ComputeUsage(TenantModel):
    """One GPU job's contribution to the ledger on one UTC day: the seconds it ran that
    day and their cost at the job's hourly rate (``billing.ledger.compute_usage_record``
    writes it and applies the difference to ``UsageDaily``). ``job_id`` is not a foreign
    key: billing never depends on the jobs app, and keeps a job's cost after it is deleted.
    ``hourly`` empty: the hardware had no price (cost 0, counted as unpriced)."""

    job_id = models.BigIntegerField()
    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    hardware = models.CharField(max_length=32)
    backend = models.CharField(max_length=32, blank=True, help_text="The backend's kind (local, hf_jobs...).")
    seconds = models.DecimalField(max_digits=12, decimal_places=6, help_text="Seconds the job ran on this day.")
    hourly = models.DecimalField(null=True, blank=True, **RATE)
    cost = models.DecimalField(default=0, **MONEY)
    price = models.ForeignKey(Price, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    api_key = models.ForeignKey("agentops.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job_id", "day"], name="compute_usage_unique")]
        indexes = [models.Index(fields=["project", "day"], name="compute_usage_project_day")]

    def __str__(self) -> str:
        return f"job {self.job_id} on {self.day}: {self.seconds} s of {self.hardware}"


class UsageDaily(LedgerRow):
    """The ledger: usage and cost per day and dimension (see the module docstring)."""

    steps = models.BigIntegerField(default=0)
    unpriced_steps = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "day", "agent_name", "model", "api_key", "end_user_id", "category", "unit"],
                nulls_distinct=False,
                name="usage_daily_unique",
            )
        ]
        indexes = [models.Index(fields=["organization", "day"]), models.Index(fields=["project", "day"])]
        # The admin lists the ledger (the cost-audit console's entry) under this name.
        verbose_name = "daily usage"
        verbose_name_plural = "daily usage"


class LedgerRollup(TenantModel):
    """What the ledger's rollups of ``UsageDaily`` hold besides their keys: the same
    measures, and ``day_rows``, how many ``UsageDaily`` rows the key covers (a reader
    that adds and subtracts days knows from it whether any row of its window is left,
    so it lists the same groups as a sum of the daily rows would, zero rows included).

    PostgreSQL keeps them exact: statement triggers on ``billing_usagedaily`` (migration
    0012) add every inserted row, subtract every deleted one and apply the difference of
    every update, in the writer's transaction (ledger refresh, GPU jobs, judge calls,
    deletion of a project or organization alike); ``ledger_rebuild`` truncates them with
    ``UsageDaily`` (a TRUNCATE fires no row trigger) and its insert refills them. Like
    ``runs.LlmHourly``, a trigger adds to a row of the key no other transaction holds
    (``FOR UPDATE SKIP LOCKED``) or inserts one, so ledger writers never wait on a
    rollup: a key may have several rows, and readers sum them (``billing.rollups``)."""

    input_tokens = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(default=0, max_digits=24, decimal_places=9)
    steps = models.BigIntegerField(default=0)
    unpriced_steps = models.BigIntegerField(default=0)
    reported_cost = models.DecimalField(default=0, max_digits=24, decimal_places=9)
    reported_computed_cost = models.DecimalField(default=0, max_digits=24, decimal_places=9)
    day_rows = models.BigIntegerField(default=0, help_text="UsageDaily rows of the key.")

    class Meta:
        abstract = True


class UsageMonthly(LedgerRollup):
    """The ledger per calendar month (``month``: its first day), with every dimension of
    ``UsageDaily`` but the day and the end user (no page sums spend per end user, and
    there may be as many of them as runs: each would be a row to write per month): a
    period's spend reads whole months from here and the days at its ends from
    ``UsageDaily`` (``billing.rollups``)."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    month = models.DateField()
    agent_name = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    # Not a foreign key: deleting an API key sets UsageDaily's to NULL, and the trigger
    # moves the rows here; a SET NULL of its own, in whichever order, would count twice.
    api_key_id = models.BigIntegerField(null=True, blank=True)
    category = _category_field()
    unit = _unit_field()

    class Meta:
        # Readers' (an organization's months) and the triggers' (a key's rows) in one.
        indexes = [
            models.Index(fields=["organization", "month", "project", "model", "agent_name"], name="usage_monthly_key")
        ]


class UsageDailyByModel(LedgerRollup):
    """The ledger per organization, day, category, unit and model (no project, agent, API
    key or end user): the billing page's charts by model or category and its energy per
    day read a period here instead of every ledger row (``billing.rollups``)."""

    day = models.DateField()
    category = _category_field()
    unit = _unit_field()
    model = models.CharField(max_length=200, blank=True)

    class Meta:
        indexes = [models.Index(fields=["organization", "day", "model"], name="usage_daily_model_key")]


class EvaluationUsage(TenantModel):
    """One judge call of an LLM-judge evaluator (an experiment's, an online rule's or a
    try), with its tokens and cost: its own record, like ``ComputeUsage`` (nothing to
    recompute it from), summed into ``UsageDaily`` as category ``evaluation``."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    evaluator = models.CharField(max_length=64, blank=True, help_text="The evaluator's name.")
    source = models.CharField(max_length=16, blank=True, help_text="experiment, online or try.")
    experiment_id = models.BigIntegerField(null=True, blank=True)
    run_id = models.BigIntegerField(null=True, blank=True, help_text="The run judged, if any.")
    model = models.CharField(max_length=200)
    input_tokens = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(default=0, **MONEY)
    unpriced = models.BooleanField(default=False)
    price = models.ForeignKey(Price, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["project", "day"], name="evaluation_usage_project_day"),
            models.Index(fields=["experiment_id"], name="evaluation_usage_experiment"),
        ]

    def __str__(self) -> str:
        return f"judge call of {self.evaluator} with {self.model} on {self.day}"


class EnergyFactor(models.Model):
    """One version of one carbon factor (see docs/billing.md, "Carbon"):

    - ``model``: Wh per 1,000 tokens (input and output alike) of the models ``pattern`` names;
    - ``gpu``: the board's power in watts of the GPU hardware ``pattern`` names;
    - ``grid``: g CO2e per kWh of the grid of the backend kind ``pattern`` names (``region``
      says which region it stands for; ``*`` is the default, also used for model calls).

    Like prices, a change adds a version with a later ``effective_from``; the one in
    effect at the usage's day applies."""

    class Kind(models.TextChoices):
        MODEL = "model", "Model energy (Wh per 1k tokens)"
        GPU = "gpu", "GPU board power (W)"
        GRID = "grid", "Grid intensity (g CO2e per kWh)"

    class Match(models.TextChoices):
        EXACT = "exact", "Exact name"
        PREFIX = "prefix", "Name prefix"

    kind = models.CharField(max_length=8, choices=Kind.choices)
    pattern = models.CharField(max_length=200, help_text="Model, hardware or backend kind; * for any.")
    match = models.CharField(max_length=8, choices=Match.choices, default=Match.EXACT)
    region = models.CharField(max_length=64, blank=True, help_text="For a grid: the region it stands for.")
    value = models.DecimalField(max_digits=14, decimal_places=6)
    source = models.CharField(max_length=400, help_text="Where the number comes from, and when it was read.")
    effective_from = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["kind", "pattern", "-effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "pattern", "match", "effective_from"], name="energy_factor_unique"),
            models.CheckConstraint(condition=models.Q(value__gte=0), name="energy_factor_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.pattern} = {self.value}"


class LedgerBacklog(models.Model):
    """Runs whose ledger contribution must be recomputed: written by ingest in the same
    transaction as the steps, drained by the ledger task."""

    run_id = models.BigIntegerField(unique=True)
    organization_id = models.BigIntegerField()
    marked_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"run {self.run_id}"


class Budget(TenantModel):
    """A spend limit for an organization, a project or an API key, per month or day."""

    class Scope(models.TextChoices):
        ORGANIZATION = "organization", "Organization"
        PROJECT = "project", "Project"
        API_KEY = "api_key", "API key"

    class Period(models.TextChoices):
        MONTHLY = "monthly", "Monthly"
        DAILY = "daily", "Daily"

    name = models.CharField(max_length=100)
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.ORGANIZATION)
    project = models.ForeignKey("agentops.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey("agentops.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.MONTHLY)
    amount = models.DecimalField(max_digits=14, decimal_places=2, help_text="The limit, in USD per period.")
    thresholds = ArrayField(models.PositiveIntegerField(), default=list, blank=True, help_text="Percentages.")
    hard_limit = models.BooleanField(
        default=False, help_text="Block new executed runs, replays, experiments and jobs once reached."
    )
    notify_emails = ArrayField(models.EmailField(), default=list, blank=True)
    webhook_ciphertext = EncryptedTextField(blank=True, help_text="Slack-compatible webhook URL, encrypted at rest.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name


class BudgetAlert(TenantModel):
    """An alert raised: a budget threshold crossed (once per threshold and period), or a
    spend spike (once per day)."""

    class Kind(models.TextChoices):
        THRESHOLD = "threshold", "Budget threshold"
        SPIKE = "spike", "Spend spike"

    budget = models.ForeignKey(Budget, null=True, blank=True, on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    period_start = models.DateField()
    threshold = models.PositiveIntegerField(default=0)
    spend = models.DecimalField(default=0, **MONEY)
    limit = models.DecimalField(null=True, blank=True, **MONEY)
    message = models.TextField()
    deliveries = models.JSONField(default=dict, blank=True, help_text="Channel -> outcome (in-app, email, webhook).")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "budget", "kind", "period_start", "threshold"],
                nulls_distinct=False,
                name="budget_alert_once",
            )
        ]


class CostRevision(models.Model):
    """A recompute applied by staff: the steps of a time range priced again with another
    price version; the old amounts are kept in ``StepCostChange``."""

    price = models.ForeignKey(Price, on_delete=models.PROTECT, related_name="+")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    summary = models.JSONField(default=dict, help_text="Per organization and model: old and new totals.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"recompute {self.pk} with {self.price}"


class StepCostChange(models.Model):
    revision = models.ForeignKey(CostRevision, on_delete=models.CASCADE, related_name="changes")
    step_id = models.BigIntegerField()
    run_id = models.BigIntegerField()
    organization_id = models.BigIntegerField()
    old_cost = models.DecimalField(null=True, **MONEY)
    new_cost = models.DecimalField(null=True, **MONEY)
    old_price_id = models.BigIntegerField(null=True)
    new_price_id = models.BigIntegerField(null=True)

    def __str__(self) -> str:
        return f"step {self.step_id}: {self.old_cost} -> {self.new_cost}"
