"""Replays of a run: start some (with changes, recorded or live tools, a fork step, a
repeat count), and list them grouped by request with how much repeats agree."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from agentops.api.idempotency import idempotent
from agentops.api.serializers import InputSerializer
from runs import selectors
from runs.api.serializers import RunDetailSerializer
from runs.api.views import RunsEndpoint
from runs.services.replay import MAX_REPEAT, TOOL_MODES, UNMATCHED_POLICIES, replay_groups, replay_start


class ReplayStartSerializer(InputSerializer):
    overrides = serializers.DictField(
        required=False,
        default=dict,
        help_text="Any of: model, system_prompt, version (of the run's agent), tools (names), "
        "temperature, top_p, max_tokens, random_seed.",
    )
    tool_mode = serializers.ChoiceField(
        choices=TOOL_MODES,
        default="recorded",
        help_text="recorded: tool calls are answered from the source run (matched by tool name and arguments, "
        "in order); live: tools are called for real.",
    )
    unmatched = serializers.ChoiceField(
        choices=UNMATCHED_POLICIES,
        default="fail",
        help_text="With recorded tools, a call the source never made: fail the replay, or call the live tool.",
    )
    fork_step = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Keep the source as it was before its model call N (copied, no model calls, no cost) "
        "and run live from that call. Runs the platform executed only.",
    )
    repeat = serializers.IntegerField(
        required=False, default=1, help_text=f"Run the same replay this many times (1 to {MAX_REPEAT})."
    )


class ReplayRunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    step_count = serializers.IntegerField()
    tokens = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=18, decimal_places=9)
    latency_ms = serializers.IntegerField(allow_null=True)


class ReplayGroupSerializer(serializers.Serializer):
    group = serializers.CharField()
    tool_mode = serializers.CharField()
    unmatched = serializers.CharField()
    fork_step = serializers.IntegerField(allow_null=True)
    overrides = serializers.DictField()
    created_at = serializers.DateTimeField()
    runs = ReplayRunSerializer(many=True)
    ended = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    agreement = serializers.FloatField(
        allow_null=True,
        help_text="Share of ended replays that succeeded with the most common output (failures never agree).",
    )
    distinct_outputs = serializers.IntegerField()
    spread = serializers.DictField(help_text="min, max, mean, stdev of step_count, tokens, cost, latency_ms.")


class ReplayListSerializer(serializers.Serializer):
    replays = ReplayGroupSerializer(many=True)


class ReplayStartedSerializer(serializers.Serializer):
    group = serializers.CharField()
    runs = RunDetailSerializer(many=True)


class RunReplaysView(RunsEndpoint):
    """GET: the run's replays grouped by request (a repeat is one group), newest first,
    with agreement and spread for repeats. POST: start replays (202, `Idempotency-Key`);
    members, or API keys with the `execute` scope."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    pagination_class = None

    @extend_schema(request=None, responses={200: ReplayListSerializer})
    def get(self, request, org_slug, project_slug, run_id):
        return Response(ReplayListSerializer({"replays": replay_groups(self.get_run())}).data)

    @extend_schema(request=ReplayStartSerializer, responses={202: ReplayStartedSerializer})
    @idempotent
    def post(self, request, org_slug, project_slug, run_id):
        serializer = ReplayStartSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        runs = replay_start(
            source=self.get_run(),
            actor=request.user if request.user.pk else None,
            overrides=data["overrides"],
            tool_mode=data["tool_mode"],
            unmatched=data["unmatched"],
            fork_step=data["fork_step"],
            repeat=data["repeat"],
            api_key=self.access.api_key,
            ip=self.client_ip,
        )
        fresh = [selectors.run_detail(project=self.project, run_id=run.pk) for run in runs]
        return Response(
            {"group": runs[0].execution["replay"]["group"], "runs": RunDetailSerializer(fresh, many=True).data},
            status=status.HTTP_202_ACCEPTED,
        )
