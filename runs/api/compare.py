"""``GET /api/v1/projects/{org}/{project}/compare/?a=<run id>&b=<run id>``: the
difference between two runs of the project (``runs.compare``), as JSON."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from runs.api.views import RunsEndpoint
from runs.compare import compare_runs, run_pair


class RunPairSerializer(serializers.Serializer):
    """The two runs to compare, by id: ``a`` (the baseline) and ``b``."""

    a = serializers.IntegerField(min_value=1, help_text="The id of the first run (the baseline).")
    b = serializers.IntegerField(min_value=1, help_text="The id of the second run.")


class RunCompareView(RunsEndpoint):
    """The difference from run `a` to run `b` of this project: metrics with deltas, the
    steps aligned pair by pair (same, changed, added, removed), the final outputs word by
    word and line by line, and the final memory snapshots' differences."""

    pagination_class = None

    @extend_schema(
        parameters=[
            OpenApiParameter("a", int, required=True, description="The id of the first run (the baseline)."),
            OpenApiParameter("b", int, required=True, description="The id of the second run."),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request, org_slug, project_slug):
        params = RunPairSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        a, b = run_pair(project=self.project, a_id=params.validated_data["a"], b_id=params.validated_data["b"])
        return Response(compare_runs(a, b))
