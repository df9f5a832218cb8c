"""The trace store: runs (traces), their steps (spans) in a tree, the transcript,
tool calls and memory snapshots. Every row carries its organization and project."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.utils import timezone

from agentops.crypto import EncryptedTextField
from agentops.scoping import TenantModel
from billing.services import costs_differ
from runs.fields import PayloadJSONField

MONEY = {"max_digits": 18, "decimal_places": 9}


# Runs' links that most runs leave empty (see Run.Meta.indexes).
NULLABLE_LINKS = ("parent_run", "executed_version", "api_key", "replay_of", "agent_session")


class Run(TenantModel):
    """One agent execution: an OpenTelemetry trace, or a run sent through the JSON batch API."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        WAITING = "waiting"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    # A run has ended: nothing more happens to it (the SQL that recomputes a run's totals
    # spells these out from here too).
    ENDED = frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELLED})
    # A run ran to its own end, well or badly: what online evaluation scores. A cancelled
    # run was stopped by a person midway, so its output says nothing about the agent.
    COMPLETED = frozenset({Status.SUCCEEDED, Status.FAILED})

    # No index of its own: the run_project_* indexes lead with it (written on every
    # ingest, for nothing).
    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="runs", db_index=False)
    # No index of its own either: run_organization_cost leads with it.
    organization = models.ForeignKey(
        "agentops.Organization", on_delete=models.CASCADE, related_name="runs_run_set", db_index=False
    )
    trace_id = models.CharField(max_length=128, help_text="OTLP trace id (hex), or the client's run id.")
    name = models.CharField(max_length=500, blank=True)
    agent_name = models.CharField(max_length=200, blank=True)
    agent_version = models.CharField(max_length=100, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    # Set when a client stated the status; otherwise it is derived from the root step.
    status_explicit = models.BooleanField(default=False)
    # Fields a client stated in a run event: span attributes never overwrite them.
    explicit_fields = ArrayField(models.CharField(max_length=32), default=list, blank=True)
    error = models.TextField(blank=True)
    input = PayloadJSONField(null=True, blank=True)
    output = PayloadJSONField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    session_id = models.CharField(max_length=200, blank=True)
    parent_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children", db_index=False
    )
    parent_trace_id = models.CharField(max_length=128, blank=True, help_text="The parent run's trace id, as sent.")
    end_user_id = models.CharField(max_length=200, blank=True)
    environment = models.CharField(max_length=100, blank=True)
    release = models.CharField(max_length=100, blank=True)
    tags = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    metadata = PayloadJSONField(default=dict, blank=True)
    # Totals, kept current as steps arrive (runs.ingest recomputes them).
    step_count = models.PositiveIntegerField(default=0)
    error_count = models.PositiveIntegerField(default=0)
    llm_call_count = models.PositiveIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    # Parts of the counts above (cache writes of the input, reasoning of the output).
    cache_write_input_tokens = models.BigIntegerField(default=0)
    reasoning_output_tokens = models.BigIntegerField(default=0)
    total_cost = models.DecimalField(default=0, **MONEY)
    # The sum of the costs the client reported (None: no step reported one), and the
    # platform's computed cost of those same steps, to compare like with like.
    reported_cost = models.DecimalField(null=True, blank=True, **MONEY)
    reported_steps_computed_cost = models.DecimalField(null=True, blank=True, **MONEY)
    unpriced_step_count = models.PositiveIntegerField(default=0)
    models_used = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    latency_ms = models.BigIntegerField(null=True, blank=True)
    search = SearchVectorField(null=True, editable=False)
    # Runs the platform executes itself (runs.execution): agent runs and replays.
    executed = models.BooleanField(default=False, db_default=False, help_text="Run by the platform's executor.")
    # The agent version an executed run used (none for a replay of an ingested run).
    executed_version = models.ForeignKey(
        "runs.AgentVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs", db_index=False
    )
    # The API key that sent the run (ingestion) or started it (execution): the ledger's key dimension.
    api_key = models.ForeignKey(
        "agentops.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # A replay's source run (runs.services.replay); its settings are in ``execution["replay"]``.
    replay_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replays", db_index=False
    )
    cancel_requested = models.BooleanField(default=False)
    # A turn of an interactive session (runs.services.sessions): its session, its number
    # there (1, 2, ...), and whether it was undone (it left the session's conversation).
    # (``session_id`` is the conversation id an ingested run was sent with.)
    agent_session = models.ForeignKey(
        "runs.Session", null=True, blank=True, on_delete=models.SET_NULL, related_name="turns", db_index=False
    )
    turn = models.PositiveIntegerField(null=True, blank=True)
    undone = models.BooleanField(default=False, db_default=False)
    # The last id of the run's event stream (runs.services.events), for a run outside a
    # session; a session's turns take their event ids from the session.
    event_seq = models.BigIntegerField(default=0, db_default=0)
    worker = models.CharField(max_length=200, blank=True, help_text="The Celery worker executing the run.")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    execution = PayloadJSONField(
        default=dict, blank=True, help_text="The executor's state: conversation, memory, step count (to resume)."
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        # Led by the trace id, so that ingest's lookup of a batch's runs by trace id can use
        # no other index (runs.ingest.run_rows._RUNS_OF_TRACES).
        constraints = [models.UniqueConstraint(fields=["trace_id", "project"], name="run_unique_trace")]
        indexes = [
            models.Index(fields=["project", "-started_at", "-id"], name="run_project_started"),
            models.Index(fields=["project", "status", "-started_at"], name="run_project_status"),
            models.Index(fields=["project", "session_id", "started_at"], name="run_project_session"),
            models.Index(fields=["project", "-created_at", "-id"], name="run_project_created"),
            # The dashboard's aggregates over a time range, read from this index alone
            # (an index-only scan) rather than from the runs' rows with their payloads.
            models.Index(
                fields=["project", "started_at"],
                include=[
                    "organization",
                    "status",
                    "latency_ms",
                    "input_tokens",
                    "output_tokens",
                    "total_cost",
                    "unpriced_step_count",
                ],
                name="run_project_started_totals",
            ),
            # The billing page's most expensive runs of a period: the costliest first,
            # read until enough started in the period (an index-only scan).
            models.Index(
                fields=["organization", "-total_cost", "-id"], include=["started_at"], name="run_organization_cost"
            ),
            # Sub-agent runs waiting for their parent run (ingest links them when it
            # arrives): only those, not every root run, so the index stays as small as
            # the runs waiting, and the planner takes it even before the table has
            # statistics (with root runs in it, it read all of a project's runs then).
            models.Index(
                fields=["project", "parent_trace_id"],
                condition=models.Q(parent_run__isnull=True) & ~models.Q(parent_trace_id=""),
                name="run_waiting_for_parent",
            ),
            GinIndex(fields=["tags"], name="run_tags"),
            GinIndex(fields=["search"], name="run_search"),
            # The runs of a parent, agent version, key, source run or session: most runs
            # have none of them, and an index of only the runs that do is not written
            # for the others (a btree holds NULLs too: two entries per new run, at
            # its insert and at its totals' update, for nothing).
            *(
                models.Index(fields=[name], condition=models.Q(**{f"{name}__isnull": False}), name=f"run_{name}")
                for name in NULLABLE_LINKS
            ),
        ]

    def __str__(self) -> str:
        return self.name or self.trace_id

    @property
    def reported_cost_differs(self) -> bool:
        """The costs clients reported differ from the computed cost of those steps by
        more than the tolerance (``BILLING_COST_TOLERANCE``)."""
        return costs_differ(self.reported_steps_computed_cost, self.reported_cost)

    @property
    def ended(self) -> bool:
        return self.status in self.ENDED


# The items of a run (steps, messages, tool calls, memory snapshots) name its organization
# and project as the run does, for scoping, without a database constraint of their own:
# their run ties them to rows that exist, since a run cannot go while it has items nor a
# project while it has runs. Each constraint cost a check per row written, about a
# quarter of PostgreSQL's CPU in ingestion (docs/performance.md). Deleting through Django
# cascades as before (``on_delete``).
# Their run (``run_id``) is checked as a foreign key would be, by triggers (migration
# 0024): an item's run must exist when its statement ends (checked once per statement,
# its runs locked FOR KEY SHARE as a foreign key's check locks them) and a run cannot be
# deleted, or its id changed, while items name it (checked at commit, per run deleted).
# A foreign key checked each of the 1.9 rows a span writes, one query per row at commit:
# about a fifth of PostgreSQL's CPU in ingestion, of which the triggers save two thirds.
# Their step (``step_id``) is unconstrained: ingestion sets it only to a step of the
# item's own run, looked up or joined in the same transaction, and steps go only with
# their run (through Django, which applies ``on_delete`` itself); the check at each
# commit was a tenth of PostgreSQL's CPU in ingestion.
def _item_run(related_name: str, *, db_index: bool = True):
    return models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name=related_name, db_index=db_index, db_constraint=False
    )


def _item_step(related_name: str):
    return models.ForeignKey(
        "runs.Step", null=True, blank=True, on_delete=models.SET_NULL, related_name=related_name, db_constraint=False
    )


# An item's organization and project are its run's, and it goes with its run (deleting an
# organization or a project deletes their runs, and the runs their items: by the items'
# run_id, which leads their indexes). Nothing reads items by organization or project
# alone, so neither column is indexed: Django's index of each foreign key was an entry
# written per item row for nothing but Django's own cascade, two to three entries per
# span ingested (about 6 us of PostgreSQL's CPU per span, docs/performance.md).
def _item_organization():
    return models.ForeignKey(
        "agentops.Organization",
        on_delete=models.DO_NOTHING,
        related_name="%(app_label)s_%(class)s_set",
        db_constraint=False,
        db_index=False,
    )


def _item_project():
    return models.ForeignKey(
        "agentops.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False, db_index=False
    )


class Step(TenantModel):
    """One span of a run: an LLM call, a tool call, a retrieval, an agent or a chain..."""

    # The columns of what a step used and cost: its tokens, computed and reported cost,
    # and the price it was computed with (small columns, for reads that skip payloads).
    USAGE_FIELDS = (
        "input_tokens",
        "cached_input_tokens",
        "cache_write_input_tokens",
        "output_tokens",
        "reasoning_output_tokens",
        "cost",
        "reported_cost",
        "reported_cost_currency",
        "reported_cost_source",
        "unpriced",
        "price_id",
    )

    class Kind(models.TextChoices):
        AGENT = "agent"
        LLM = "llm"
        TOOL = "tool"
        RETRIEVAL = "retrieval"
        EMBEDDING = "embedding"
        CHAIN = "chain"
        MEMORY = "memory"
        GUARDRAIL = "guardrail"
        CUSTOM = "custom"

    class Status(models.TextChoices):
        UNSET = "unset"
        OK = "ok"
        ERROR = "error"

    organization = _item_organization()
    # No index of its own: step_project_started leads with it.
    project = _item_project()
    # No index of its own: step_unique_span and step_run_started lead with it (written on every ingest, for nothing).
    run = _item_run("steps", db_index=False)
    span_id = models.CharField(max_length=128)
    parent_span_id = models.CharField(max_length=128, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.CUSTOM)
    name = models.CharField(max_length=500, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.UNSET)
    error = models.TextField(blank=True)
    model = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=100, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    # Parts of the counts above: cache writes are input tokens, reasoning tokens are
    # output tokens (as OpenTelemetry reports them); each token is priced once.
    cache_write_input_tokens = models.BigIntegerField(default=0)
    reasoning_output_tokens = models.BigIntegerField(default=0)
    # Per-modality counts as sent: {"input": {"image": 1200}, "output": {"audio": 40}}.
    modality_tokens = models.JSONField(default=dict, blank=True)
    cost = models.DecimalField(null=True, blank=True, **MONEY)
    # The cost the client reported (``gen_ai.usage.cost``), beside the computed one.
    reported_cost = models.DecimalField(null=True, blank=True, **MONEY)
    reported_cost_currency = models.CharField(max_length=3, blank=True)
    reported_cost_source = models.CharField(max_length=16, blank=True, help_text="provider or local, as sent.")
    unpriced = models.BooleanField(default=False, help_text="A model call whose model has no price.")
    # Without a database constraint: prices are versions that stay (changing one adds a
    # version), and deleting one that priced steps is refused by Django (PROTECT). The
    # check at each commit, a query per priced step that also locked the shared price
    # row, was 2-8 us of PostgreSQL's 55 per span in ingestion (docs/performance.md).
    # Indexed for that refusal's lookup, for the steps that have a price only.
    price = models.ForeignKey(
        "billing.Price",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    input = PayloadJSONField(null=True, blank=True)
    output = PayloadJSONField(null=True, blank=True)
    attributes = PayloadJSONField(default=dict, blank=True)
    events = PayloadJSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "span_id"], name="step_unique_span")]
        indexes = [
            models.Index(fields=["run", "started_at", "id"], name="step_run_started"),
            models.Index(fields=["project", "-started_at"], name="step_project_started"),
            models.Index(fields=["price"], condition=models.Q(price__isnull=False), name="step_priced"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"

    @property
    def reported_cost_differs(self) -> bool:
        """The reported cost differs from the computed one by more than the tolerance."""
        return costs_differ(self.cost, self.reported_cost)


class LlmHourly(TenantModel):
    """LLM calls (steps of kind ``llm`` with a model and a start time) per project, UTC
    hour and model: how many, how many priced and their cost. The dashboard's "cost by
    model" reads whole hours from here instead of scanning the steps.

    PostgreSQL keeps it exact: statement triggers on ``runs_step`` (migration 0015) add
    every inserted step, subtract every deleted one and apply the difference of every
    update (ingestion, cost recomputes, retention, deletion alike). A trigger adds to a
    row of the key that no other transaction holds (``FOR UPDATE SKIP LOCKED``) or
    inserts one, so concurrent ingestion never waits on it: a key has as many rows as
    writers ever held it at once, and readers sum them."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    model = models.CharField(max_length=200)
    calls = models.BigIntegerField(default=0)
    priced_calls = models.BigIntegerField(default=0, help_text="Calls with a cost (an unpriced call has none).")
    cost = models.DecimalField(default=0, max_digits=24, decimal_places=9)

    class Meta:
        indexes = [models.Index(fields=["project", "hour"], name="llm_hourly_project_hour")]


class Message(TenantModel):
    """One message of the transcript, in order, tied to the LLM step that produced or consumed it."""

    organization = _item_organization()
    project = _item_project()
    # No index of its own: message_unique_id and message_run_position lead with it
    # (written on every ingest, for nothing).
    run = _item_run("messages", db_index=False)
    step = _item_step("messages")
    span_id = models.CharField(max_length=128, blank=True, help_text="The step's span id; links it in any order.")
    message_id = models.CharField(max_length=200, help_text="Client id, or derived from the step and position.")
    position = models.BigIntegerField(
        help_text="Order in the transcript: the client's position, or for messages read from spans the "
        "step's time in microseconds x 1000 plus the index (inputs before outputs)."
    )
    role = models.CharField(max_length=32)
    content = PayloadJSONField(null=True, blank=True)
    tool_calls = PayloadJSONField(default=list, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    name = models.CharField(max_length=200, blank=True)
    tokens = models.IntegerField(null=True, blank=True)
    finish_reason = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "message_id"], name="message_unique_id")]
        indexes = [models.Index(fields=["run", "position", "id"], name="message_run_position")]
        ordering = ["position", "id"]


class ToolCall(TenantModel):
    """One tool invocation: arguments, result or error, latency."""

    organization = _item_organization()
    project = _item_project()
    # No index of its own: tool_call_unique_id and tool_call_run_started lead with it
    # (written on every ingest, for nothing).
    run = _item_run("tool_calls", db_index=False)
    step = _item_step("tool_calls")
    span_id = models.CharField(max_length=128, blank=True)
    call_id = models.CharField(max_length=200, help_text="Client id, the tool call id, or the step's span id.")
    tool_name = models.CharField(max_length=200)
    arguments = PayloadJSONField(null=True, blank=True)
    result = PayloadJSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "call_id"], name="tool_call_unique_id")]
        indexes = [models.Index(fields=["run", "started_at", "id"], name="tool_call_run_started")]


class MemorySnapshot(TenantModel):
    """The agent's memory or state after a step, in order."""

    organization = _item_organization()
    project = _item_project()
    # No index of its own: memory_unique_id and memory_run_sequence lead with it.
    run = _item_run("memory_snapshots", db_index=False)
    step = _item_step("memory_snapshots")
    span_id = models.CharField(max_length=128, blank=True)
    snapshot_id = models.CharField(max_length=200)
    sequence = models.BigIntegerField()
    state = PayloadJSONField()
    taken_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "snapshot_id"], name="memory_unique_id")]
        indexes = [models.Index(fields=["run", "sequence", "id"], name="memory_run_sequence")]
        ordering = ["sequence", "id"]


class IngestSettings(TenantModel):
    """Per-project settings of the data: PII redaction before storage, retention, and what
    is logged to Weights & Biases (evals acts on it; runs only stores the choice)."""

    class WandbLogging(models.TextChoices):
        OFF = "off", "Off"
        EXPERIMENTS = "experiments", "Experiments"
        RUNS = "runs", "Runs and experiments"

    class Redaction(models.TextChoices):
        EMAIL = "email", "Email addresses"
        API_KEY = "api_key", "API keys and bearer tokens"
        CARD = "card", "Payment card numbers"
        PHONE = "phone", "Phone numbers"

    project = models.OneToOneField("agentops.Project", on_delete=models.CASCADE, related_name="ingest_settings")
    redact = ArrayField(models.CharField(max_length=16, choices=Redaction.choices), default=list, blank=True)
    custom_patterns = ArrayField(
        models.CharField(max_length=500), default=list, blank=True, help_text="Extra regular expressions to redact."
    )
    retention_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Delete runs older than this many days (nightly). Empty keeps them."
    )
    wandb_logging = models.CharField(
        max_length=16,
        choices=WandbLogging.choices,
        default=WandbLogging.EXPERIMENTS,
        db_default=WandbLogging.EXPERIMENTS,
        help_text="What goes to Weights & Biases when the organization saved a W&B key.",
    )
    updated_at = models.DateTimeField(default=timezone.now)


class SavedView(TenantModel):
    """A named runs-list query (the filters as a query string), saved by one member and
    offered to everyone in the project. Only its owner deletes it."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="saved_run_views")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    query = models.CharField(max_length=2000, blank=True, help_text="The runs list's query string, without paging.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "owner", "name"], name="saved_view_unique_name")]
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class Agent(TenantModel):
    """An agent the platform runs. Its configuration lives in immutable versions."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    latest_version = models.PositiveIntegerField(default=0)
    # Which of the platform's own agents this is (the analyst: "analyst", its tool set),
    # set only by the platform and never by a form or the API; "" for every agent a person
    # makes. The platform finds its agents by this, never by name: a person's agent may
    # share the name. Platform agents are not listed, edited or run from the agents pages
    # and API (docs/mcp.md#the-analyst).
    platform = models.CharField(max_length=64, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"], condition=models.Q(platform=""), name="agent_unique_name"
            ),
            models.UniqueConstraint(
                fields=["project", "platform"], condition=~models.Q(platform=""), name="agent_unique_platform"
            ),
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AgentVersion(TenantModel):
    """One immutable configuration of an agent. Every edit makes a new one; runs name
    the version they used, so any run can be reproduced."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    model = models.CharField(max_length=200)
    system_prompt = models.TextField(blank=True)
    tools = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    approval_tools = ArrayField(
        models.CharField(max_length=64), default=list, blank=True, help_text="Tools that pause the run for a person."
    )
    parameters = models.JSONField(default=dict, blank=True, help_text="temperature, top_p, max_tokens, random_seed")
    step_limit = models.PositiveIntegerField(default=20)
    # A platform tool set (runs.tools.registry.TOOLSETS) its tools come from: set only on
    # the platform's own agents (the analyst); "" for every agent a person makes.
    toolset = models.CharField(max_length=64, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "number"], name="agent_version_unique_number")]
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"{self.agent_id} v{self.number}"


class WebhookTool(TenantModel):
    """A team's own tool: a JSON schema and a URL the platform calls with an HMAC-signed request."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="webhook_tools")
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True)
    parameters = models.JSONField(default=dict, help_text="JSON schema of the arguments (an object schema).")
    url = models.URLField(max_length=500)
    secret_ciphertext = EncryptedTextField(help_text="The HMAC signing secret, encrypted at rest.")
    timeout_seconds = models.FloatField(default=10.0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="webhook_tool_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Approval(TenantModel):
    """A tool call waiting for a person: approve (optionally with edited arguments),
    reject, or let it expire. The run waits meanwhile."""

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    call_id = models.CharField(max_length=200)
    tool_name = models.CharField(max_length=200)
    arguments = PayloadJSONField(null=True, blank=True)
    approved_arguments = PayloadJSONField(null=True, blank=True, help_text="The arguments as approved (edited or not).")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    reason = models.TextField(blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "call_id"], name="approval_unique_call")]
        indexes = [models.Index(fields=["status", "expires_at"], name="approval_pending_expiry")]
        ordering = ["created_at", "id"]


class Session(TenantModel):
    """An interactive conversation with an agent version: its turns are executed runs
    (``Run.agent_session``, in order of ``Run.turn``); its events are a durable stream with
    ids 1, 2, 3... (``event_seq`` is the last, taken under the session's row lock, so
    ids are assigned in commit order: a reader never sees 5 before 4)."""

    class Status(models.TextChoices):
        OPEN = "open"
        CLOSED = "closed"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="agent_sessions")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    agent_version = models.ForeignKey(AgentVersion, on_delete=models.PROTECT, related_name="sessions")
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey("agentops.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    title = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    # Tools whose calls this session approves without asking ("*": every tool).
    approve_all = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    # "Compact now": the next turn compacts its conversation before its first model call.
    compact_requested = models.BooleanField(default=False)
    event_seq = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["project", "-updated_at", "-id"], name="session_project_updated")]

    def __str__(self) -> str:
        return self.title or f"session {self.pk}"


class SessionMessage(TenantModel):
    """A user message sent to a session: it starts a turn when the session is idle, or
    waits (``queued``) for the turns before it, processed in the order they came."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        STARTED = "started"
        DROPPED = "dropped"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages")
    content = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    run = models.OneToOneField(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["session", "status", "id"], name="session_message_queue")]


class StreamEvent(TenantModel):
    """One event of a session's or an executed run's stream (runs.services.events). A
    turn's events belong to its session's stream (``seq`` is the session's) and name the
    run too, so the run's own stream is the same rows; a run outside a session numbers
    its own."""

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="stream_events")
    seq = models.BigIntegerField()
    type = models.CharField(max_length=32)
    data = PayloadJSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "seq"], condition=models.Q(session__isnull=False), name="stream_event_session_seq"
            ),
            models.UniqueConstraint(
                fields=["run", "seq"], condition=models.Q(session__isnull=True), name="stream_event_run_seq"
            ),
        ]
        indexes = [models.Index(fields=["run", "seq"], name="stream_event_run")]
