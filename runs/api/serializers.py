"""Serializers of the runs API.

Input: one serializer per event type of ``POST /api/v1/ingest`` (they are also the
schema of the batch in /api/schema/). Fields are strict about types: a string field
takes a JSON string, an integer field a JSON integer, so a client bug shows up as a
400 naming the field instead of being silently coerced. ``null`` means "empty" for
optional fields. A field an event type does not have (including any ``project`` or
``organization``: the project always comes from the API key) makes that event a 400
naming it, as in every request body of the API.

Output: runs, steps, messages, tool calls, memory snapshots and sessions as the read
endpoints return them. Money is a decimal string, never a float.
"""

from __future__ import annotations

import math

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from agentops.api.serializers import InputSerializer
from runs.api.listed import ListedSerializer
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent, clean_reported_cost
from runs.models import MemorySnapshot, Message, Run, Step, ToolCall
from runs.selectors import SORTABLE

# No model call has a billion tokens (the OTLP mapping ignores larger counts too). A
# run's cost is numeric(18, 9), under a billion dollars: 200 steps of 10^12 tokens
# overflowed it, and every later batch of that run failed with it.
MAX_TOKENS = 100_000_000
BIGINT_MAX = 2**63 - 1
MAX_TAGS = 100


# --- Strict field types -----------------------------------------------------------


class StrictCharField(serializers.CharField):
    """A JSON string only (DRF's CharField would turn 5 into "5"). Kept exactly as sent."""

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class IdField(StrictCharField):
    """A client-chosen id: a non-empty string."""

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_blank", False)
        super().__init__(**kwargs)


class OptionalTextField(StrictCharField):
    """An optional string; ``null`` is stored as the empty string."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def validate_empty_values(self, data):
        is_empty, value = super().validate_empty_values(data)
        return is_empty, ("" if is_empty and value is None else value)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only (not a string, a float or a boolean)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class TokenCountField(StrictIntegerField):
    """A token count; ``null`` or absent is 0."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", MAX_TOKENS)
        super().__init__(**kwargs)

    def validate_empty_values(self, data):
        is_empty, value = super().validate_empty_values(data)
        return is_empty, (0 if is_empty and value is None else value)


class ModalityTokensField(serializers.DictField):
    """Token counts per modality: ``{"input": {"image": 1200}, "output": {"audio": 40}}``."""

    DIRECTIONS = ("input", "output")

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError('must be an object like {"input": {"image": 1200}}.')
        counts: dict[str, dict[str, int]] = {}
        for direction, by_modality in data.items():
            if direction not in self.DIRECTIONS:
                raise serializers.ValidationError(f"{str(direction)[:40]!r}: must be input or output.")
            if not isinstance(by_modality, dict):
                raise serializers.ValidationError(f"{direction}: must be an object of modality -> token count.")
            for modality, count in by_modality.items():
                if not isinstance(modality, str) or not modality.strip() or len(modality) > 32:
                    raise serializers.ValidationError(f"{direction}: a modality is a name of 1 to 32 characters.")
                if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_TOKENS:
                    raise serializers.ValidationError(
                        f"{direction}.{modality}: {str(count)[:40]} is not a token count (0 to {MAX_TOKENS:,})."
                    )
                counts.setdefault(direction, {})[modality.strip().lower()] = count
        return counts


class StrictFloatField(serializers.FloatField):
    """A finite JSON number (integer or decimal), not a string or a boolean."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            self.fail("invalid")
        return value


class TimestampField(serializers.DateTimeField):
    """An ISO 8601 string; without an offset it is taken as UTC."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, value):
        if not isinstance(value, str):
            self.fail("invalid", format="an ISO 8601 string, such as 2026-11-20T12:00:00.250Z")
        return super().to_internal_value(value)


class ObjectField(serializers.DictField):
    """A JSON object; ``null`` is stored as ``{}``."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def validate_empty_values(self, data):
        is_empty, value = super().validate_empty_values(data)
        return is_empty, ({} if is_empty and value is None else value)


def _any_json(**kwargs) -> serializers.JSONField:
    kwargs.setdefault("required", False)
    kwargs.setdefault("allow_null", True)
    return serializers.JSONField(**kwargs)


# --- Batch ingestion: one serializer per event type ------------------------------


class RunEventSerializer(InputSerializer):
    """A run (one agent execution, an OpenTelemetry trace). Only the fields present
    change: re-sending a run with just ``status`` and ``ended_at`` finishes it and
    keeps everything else."""

    type = serializers.ChoiceField(choices=["run"])
    id = IdField(max_length=128, help_text="The run's client id; it is the run's trace_id.")
    name = OptionalTextField(max_length=500)
    agent_name = OptionalTextField(max_length=200)
    agent_version = OptionalTextField(max_length=100)
    status = serializers.ChoiceField(
        choices=Run.Status.choices,
        required=False,
        help_text="Stated by the client, it is kept; when never stated it follows the root step "
        "(running, then succeeded or failed).",
    )
    error = OptionalTextField()
    input = _any_json(help_text="Any JSON.")
    output = _any_json(help_text="Any JSON.")
    started_at = TimestampField()
    ended_at = TimestampField()
    session_id = OptionalTextField(max_length=200, help_text="Groups the runs of one conversation.")
    parent_run_id = OptionalTextField(
        max_length=128, help_text="The client id of the parent run (a sub-agent's caller), in any order."
    )
    end_user_id = OptionalTextField(max_length=200)
    environment = OptionalTextField(max_length=100)
    release = OptionalTextField(max_length=100)
    tags = serializers.ListField(
        child=StrictCharField(max_length=100),
        max_length=MAX_TAGS,
        required=False,
        allow_null=True,
        help_text=f"At most {MAX_TAGS} strings of up to 100 characters.",
    )
    metadata = ObjectField(help_text="A JSON object.")

    def validate(self, attrs):
        if attrs.get("parent_run_id") and attrs["parent_run_id"] == attrs["id"]:
            raise serializers.ValidationError({"parent_run_id": "a run cannot be its own parent"})
        return attrs

    def to_event(self, data: dict) -> RunEvent:
        """The ingest event of validated ``data`` (from ``run_validation``)."""
        data = dict(data)
        data.pop("type")
        trace_id = data.pop("id")
        if "parent_run_id" in data:
            data["parent_trace_id"] = data.pop("parent_run_id")
        if "tags" in data and data["tags"] is None:
            data["tags"] = []
        return RunEvent(trace_id=trace_id, fields=data)


class StepEventSerializer(InputSerializer):
    """A step (span) of a run: an LLM call, a tool call, a retrieval... Cost is computed
    from the price table when the step has a model. Re-sending a step replaces it."""

    type = serializers.ChoiceField(choices=["step"])
    id = IdField(max_length=128, help_text="The step's client id; it is the step's span_id.")
    run_id = IdField(max_length=128, help_text="The run's client id. The run may arrive later, or never.")
    parent_id = OptionalTextField(max_length=128, help_text="The parent step's id; empty for the root step.")
    kind = serializers.ChoiceField(choices=Step.Kind.choices, required=False, default=Step.Kind.CUSTOM)
    name = OptionalTextField(max_length=500)
    started_at = TimestampField()
    ended_at = TimestampField()
    status = serializers.ChoiceField(choices=Step.Status.choices, required=False, default=Step.Status.UNSET)
    error = OptionalTextField()
    model = OptionalTextField(max_length=200)
    provider = OptionalTextField(max_length=100)
    input_tokens = TokenCountField()
    cached_input_tokens = TokenCountField(help_text="Cache reads: part of input_tokens.")
    cache_write_input_tokens = TokenCountField(help_text="Cache writes: part of input_tokens.")
    output_tokens = TokenCountField()
    reasoning_output_tokens = TokenCountField(help_text="Reasoning tokens: part of output_tokens.")
    modality_tokens = ModalityTokensField(help_text='Counts per modality: {"input": {"image": 1200}}.')
    reported_cost = _any_json(help_text="The cost the client or its provider reported: a number from 0.")
    reported_cost_currency = OptionalTextField(max_length=3, help_text="ISO 4217 code; USD when absent.")
    reported_cost_source = OptionalTextField(max_length=16, help_text="provider or local.")
    input = _any_json(help_text="Any JSON.")
    output = _any_json(help_text="Any JSON.")
    attributes = ObjectField(help_text="A JSON object of raw attributes.")

    def validate(self, attrs):
        try:
            cost = clean_reported_cost(
                attrs.get("reported_cost"), attrs.get("reported_cost_currency"), attrs.get("reported_cost_source")
            )
        except ValueError as error:
            raise serializers.ValidationError({"reported_cost": str(error)}) from None
        attrs["reported_cost"], attrs["reported_cost_currency"], attrs["reported_cost_source"] = cost
        return attrs

    def to_event(self, data: dict) -> StepEvent:
        """The ingest event of validated ``data`` (from ``run_validation``)."""
        return StepEvent(
            trace_id=data["run_id"],
            span_id=data["id"],
            parent_span_id=data.get("parent_id", ""),
            kind=data["kind"],
            name=data.get("name", ""),
            started_at=data.get("started_at"),
            ended_at=data.get("ended_at"),
            status=data["status"],
            error=data.get("error", ""),
            model=data.get("model", ""),
            provider=data.get("provider", ""),
            input_tokens=data.get("input_tokens", 0),
            cached_input_tokens=data.get("cached_input_tokens", 0),
            output_tokens=data.get("output_tokens", 0),
            cache_write_input_tokens=data.get("cache_write_input_tokens", 0),
            reasoning_output_tokens=data.get("reasoning_output_tokens", 0),
            modality_tokens=data.get("modality_tokens") or {},
            reported_cost=data.get("reported_cost"),
            reported_cost_currency=data.get("reported_cost_currency", ""),
            reported_cost_source=data.get("reported_cost_source", ""),
            input=data.get("input"),
            output=data.get("output"),
            attributes=data.get("attributes") or {},
        )


class MessageEventSerializer(InputSerializer):
    """One message of the transcript. ``position`` orders the transcript."""

    type = serializers.ChoiceField(choices=["message"])
    id = IdField(max_length=200, help_text="The message's client id, unique within its run.")
    run_id = IdField(max_length=128)
    step_id = OptionalTextField(max_length=128, help_text="The LLM step that produced or consumed it.")
    position = StrictIntegerField(min_value=-BIGINT_MAX, max_value=BIGINT_MAX)
    role = StrictCharField(max_length=32, help_text="system, user, assistant, tool...")
    content = _any_json(help_text="A string, or any JSON (content parts).")
    tool_calls = serializers.ListField(
        child=serializers.JSONField(), required=False, allow_null=True, help_text="The tool calls it asks for."
    )
    tool_call_id = OptionalTextField(max_length=200, help_text="For a tool message: the call it answers.")
    name = OptionalTextField(max_length=200)
    tokens = StrictIntegerField(min_value=0, max_value=2**31 - 1, required=False, allow_null=True)
    finish_reason = OptionalTextField(max_length=64)

    def to_event(self, data: dict) -> MessageEvent:
        """The ingest event of validated ``data`` (from ``run_validation``)."""
        return MessageEvent(
            trace_id=data["run_id"],
            message_id=data["id"],
            span_id=data.get("step_id", ""),
            position=data["position"],
            role=data["role"],
            content=data.get("content"),
            tool_calls=data.get("tool_calls") or [],
            tool_call_id=data.get("tool_call_id", ""),
            name=data.get("name", ""),
            tokens=data.get("tokens"),
            finish_reason=data.get("finish_reason", ""),
        )


class ToolCallEventSerializer(InputSerializer):
    """One tool invocation: arguments, result or error, latency."""

    type = serializers.ChoiceField(choices=["tool_call"])
    id = IdField(
        max_length=200, help_text="The call's client id (the model's tool call id fits), unique within its run."
    )
    run_id = IdField(max_length=128)
    step_id = OptionalTextField(max_length=128, help_text="The tool step it belongs to.")
    tool_name = StrictCharField(max_length=200)
    arguments = _any_json(help_text="Any JSON.")
    result = _any_json(help_text="Any JSON.")
    error = OptionalTextField()
    latency_ms = StrictFloatField(min_value=0, required=False, allow_null=True)
    started_at = TimestampField()

    def to_event(self, data: dict) -> ToolCallEvent:
        """The ingest event of validated ``data`` (from ``run_validation``)."""
        return ToolCallEvent(
            trace_id=data["run_id"],
            call_id=data["id"],
            span_id=data.get("step_id", ""),
            tool_name=data["tool_name"],
            arguments=data.get("arguments"),
            result=data.get("result"),
            error=data.get("error", ""),
            latency_ms=data.get("latency_ms"),
            started_at=data.get("started_at"),
        )


class MemoryEventSerializer(InputSerializer):
    """The agent's memory or state after a step. ``sequence`` orders the snapshots."""

    type = serializers.ChoiceField(choices=["memory"])
    id = IdField(max_length=200, help_text="The snapshot's client id, unique within its run.")
    run_id = IdField(max_length=128)
    step_id = OptionalTextField(max_length=128, help_text="The step after which it was taken.")
    sequence = StrictIntegerField(min_value=-BIGINT_MAX, max_value=BIGINT_MAX)
    state = serializers.JSONField(help_text="Any JSON except null.")
    taken_at = TimestampField()

    def to_event(self, data: dict) -> MemoryEvent:
        """The ingest event of validated ``data`` (from ``run_validation``)."""
        return MemoryEvent(
            trace_id=data["run_id"],
            snapshot_id=data["id"],
            span_id=data.get("step_id", ""),
            sequence=data["sequence"],
            state=data["state"],
            taken_at=data.get("taken_at"),
        )


EVENT_SERIALIZERS: dict[str, type[serializers.Serializer]] = {
    "run": RunEventSerializer,
    "step": StepEventSerializer,
    "message": MessageEventSerializer,
    "tool_call": ToolCallEventSerializer,
    "memory": MemoryEventSerializer,
}


class IngestBatchSerializer(InputSerializer):
    """The request of ``POST /api/v1/ingest`` (documentation only: each event is
    validated on its own by the serializer of its type)."""

    events = PolymorphicProxySerializer(
        component_name="IngestEvent",
        serializers=EVENT_SERIALIZERS,
        resource_type_field_name="type",
        many=True,
    )


class IngestErrorSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="invalid (400) or too_large (413).")
    message = serializers.CharField(help_text="One line naming the field, e.g. 'started_at: Datetime has wrong ...'.")


class IngestResultSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="The event's position in the request.")
    id = serializers.CharField(allow_null=True, help_text="The event's id as sent (null unless it was a string).")
    type = serializers.CharField(allow_null=True)
    status = serializers.IntegerField(help_text="201, 200, 400 or 413, as for a request of its own.")
    code = serializers.ChoiceField(
        choices=["created", "updated", "superseded", "invalid", "too_large"],
        help_text="created (201): new; updated (200): the id existed and was updated; superseded (200): "
        "a later event of the batch has the same id and was stored instead; invalid (400); too_large (413).",
    )
    error = IngestErrorSerializer(allow_null=True)


class IngestResponseSerializer(serializers.Serializer):
    results = IngestResultSerializer(many=True, help_text="One per event, in request order.")


# --- Reads ----------------------------------------------------------------------


class RunFilterSerializer(serializers.Serializer):
    """Query parameters of the runs list and the export."""

    status = serializers.CharField(
        required=False, max_length=200, help_text="Comma-separated: queued,running,waiting,succeeded,failed,cancelled"
    )
    agent = serializers.CharField(required=False, max_length=200, help_text="Exact agent name.")
    model = serializers.CharField(required=False, max_length=200, help_text="Runs that used this model.")
    tag = serializers.CharField(required=False, max_length=100)
    session = serializers.CharField(required=False, max_length=200, help_text="Exact session id.")
    environment = serializers.CharField(required=False, max_length=100)
    end_user = serializers.CharField(required=False, max_length=200, help_text="Exact end-user id.")
    trace_id = serializers.CharField(required=False, max_length=128)
    started_after = serializers.DateTimeField(required=False, help_text="ISO 8601; inclusive.")
    started_before = serializers.DateTimeField(required=False, help_text="ISO 8601; exclusive.")
    min_cost = serializers.DecimalField(max_digits=18, decimal_places=9, required=False, min_value=0)
    max_cost = serializers.DecimalField(max_digits=18, decimal_places=9, required=False, min_value=0)
    min_latency_ms = serializers.IntegerField(required=False, min_value=0, max_value=BIGINT_MAX)
    max_latency_ms = serializers.IntegerField(required=False, min_value=0, max_value=BIGINT_MAX)
    q = serializers.CharField(required=False, max_length=500, help_text="Full-text search over input and output.")
    sort = serializers.ChoiceField(choices=list(SORTABLE), required=False, default="-started_at")

    def validate_status(self, value: str) -> list[str]:
        statuses = [part.strip() for part in value.split(",") if part.strip()]
        unknown = [part for part in statuses if part not in Run.Status.values]
        if unknown:
            raise serializers.ValidationError(f"'{unknown[0]}' is not a run status; use {', '.join(Run.Status.values)}")
        return statuses


class RunSerializer(ListedSerializer):
    """A run in lists and the export."""

    # A string, not an enum, in the output schema: the enum is the run event's, and one
    # choice set in several components would make the schema generator warn (which
    # fails `check --deploy`).
    status = serializers.CharField(read_only=True, help_text=", ".join(Run.Status.values))
    parent_run_id = serializers.IntegerField(read_only=True, allow_null=True, help_text="The parent run's id.")
    total_cost = serializers.DecimalField(max_digits=18, decimal_places=9, read_only=True)
    reported_cost = serializers.DecimalField(
        max_digits=18,
        decimal_places=9,
        read_only=True,
        allow_null=True,
        help_text="The sum of the costs clients reported; null when no step reported one.",
    )
    reported_steps_computed_cost = serializers.DecimalField(
        max_digits=18,
        decimal_places=9,
        read_only=True,
        allow_null=True,
        help_text="The platform's computed cost of the steps that reported one (to compare with reported_cost).",
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "trace_id",
            "name",
            "status",
            "error",
            "session_id",
            "parent_run_id",
            "parent_trace_id",
            "agent_name",
            "agent_version",
            "environment",
            "release",
            "tags",
            "end_user_id",
            "started_at",
            "ended_at",
            "latency_ms",
            "input_tokens",
            "cached_input_tokens",
            "cache_write_input_tokens",
            "output_tokens",
            "reasoning_output_tokens",
            "total_cost",
            "reported_cost",
            "reported_steps_computed_cost",
            "unpriced_step_count",
            "step_count",
            "llm_call_count",
            "error_count",
            "models_used",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    """A run with its payloads; ``executed``: run by the platform, ``replay_of_id``: the
    run a replay replays."""

    replay_of_id = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "input", "output", "metadata", "executed", "replay_of_id"]
        read_only_fields = fields


class StepSerializer(ListedSerializer):
    status = serializers.CharField(read_only=True, help_text=", ".join(Step.Status.values))
    parent_id = serializers.CharField(source="parent_span_id", read_only=True, help_text="The parent's span id.")
    cost = serializers.DecimalField(
        max_digits=18, decimal_places=9, read_only=True, allow_null=True, help_text="Null when unpriced or no model."
    )
    reported_cost = serializers.DecimalField(
        max_digits=18, decimal_places=9, read_only=True, allow_null=True, help_text="Null when none was reported."
    )

    class Meta:
        model = Step
        fields = [
            "id",
            "span_id",
            "parent_id",
            "kind",
            "name",
            "model",
            "provider",
            "input_tokens",
            "cached_input_tokens",
            "cache_write_input_tokens",
            "output_tokens",
            "reasoning_output_tokens",
            "modality_tokens",
            "cost",
            "reported_cost",
            "reported_cost_currency",
            "reported_cost_source",
            "unpriced",
            "started_at",
            "ended_at",
            "duration_ms",
            "status",
            "error",
            "input",
            "output",
            "attributes",
            "events",
        ]
        read_only_fields = fields


class StepListItemSerializer(StepSerializer):
    depth = serializers.IntegerField(read_only=True, help_text="0 for a root step.")

    class Meta(StepSerializer.Meta):
        fields = [*StepSerializer.Meta.fields, "depth"]
        read_only_fields = fields


@extend_schema_field({"type": "array", "items": {"$ref": "#/components/schemas/StepTreeNode"}})
class StepChildrenField(serializers.ListField):
    pass


class StepTreeNodeSerializer(StepListItemSerializer):
    """A step with its children, nested (``?tree=1``)."""

    children = StepChildrenField(read_only=True)

    class Meta(StepListItemSerializer.Meta):
        fields = [*StepListItemSerializer.Meta.fields, "children"]
        read_only_fields = fields


class MessageSerializer(serializers.ModelSerializer):
    step_id = serializers.IntegerField(read_only=True, allow_null=True, help_text="The step's id, once it arrived.")

    class Meta:
        model = Message
        fields = [
            "id",
            "message_id",
            "span_id",
            "step_id",
            "position",
            "role",
            "content",
            "tool_calls",
            "tool_call_id",
            "name",
            "tokens",
            "finish_reason",
            "created_at",
        ]
        read_only_fields = fields


class ToolCallSerializer(serializers.ModelSerializer):
    step_id = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = ToolCall
        fields = [
            "id",
            "call_id",
            "span_id",
            "step_id",
            "tool_name",
            "arguments",
            "result",
            "error",
            "latency_ms",
            "started_at",
            "created_at",
        ]
        read_only_fields = fields


class MemorySnapshotSerializer(serializers.ModelSerializer):
    step_id = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = MemorySnapshot
        fields = ["id", "snapshot_id", "span_id", "step_id", "sequence", "state", "taken_at", "created_at"]
        read_only_fields = fields


class SessionSerializer(serializers.Serializer):
    """A session (conversation): the runs sharing a session id, with totals."""

    session_id = serializers.CharField()
    run_count = serializers.IntegerField()
    failed = serializers.IntegerField(help_text="Runs that failed.")
    first_started_at = serializers.DateTimeField(allow_null=True)
    last_started_at = serializers.DateTimeField(allow_null=True)
    total_cost = serializers.DecimalField(max_digits=None, decimal_places=9, allow_null=True)
    input_tokens = serializers.IntegerField(allow_null=True)
    output_tokens = serializers.IntegerField(allow_null=True)


class SessionListFilterSerializer(serializers.Serializer):
    started_after = serializers.DateTimeField(required=False, help_text="Only runs started at or after this.")


class SessionDetailSerializer(SessionSerializer):
    runs = RunSerializer(many=True, help_text="The session's runs, oldest first.")
