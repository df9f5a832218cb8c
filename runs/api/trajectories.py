"""Trajectories as JSON Lines (``agentops.trajectory/1``, docs/sessions.md#trajectories):
of one run, of an interactive session (a line per turn), or of an ingested conversation
(a line per run). Streamed as they are read; ``work:read`` like every read; another
tenant's run or session is 404 like a missing one."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.renderers import JSONRenderer

from agentops.api.base import ProjectEndpoint
from agentops.errors import InvalidRequest, NotFound
from runs import selectors, trajectories
from runs.api.views import NdjsonRenderer
from runs.models import Run
from runs.services.sessions import session_get

LINES = {
    (200, trajectories.CONTENT_TYPE): OpenApiResponse(
        OpenApiTypes.OBJECT, description=f"JSON Lines: one `{trajectories.FORMAT}` object per run."
    )
}


class TrajectoryEndpoint(ProjectEndpoint):
    permissions = {"GET": "work:read"}
    queryset = Run.objects.none()
    pagination_class = None
    # An error is JSON whatever the client accepts (a line of JSON for x-ndjson).
    renderer_classes = [JSONRenderer, NdjsonRenderer]

    def download(self, lines, filename: str):
        return trajectories.download(self.request, lines, organization=self.organization, filename=filename)


class RunTrajectoryView(TrajectoryEndpoint):
    """One run's trajectory: one line (with its session and turn when it is a turn)."""

    @extend_schema(responses=LINES)
    def get(self, request, org_slug, project_slug, run_id):
        run = selectors.run_detail(project=self.project, run_id=run_id)
        return self.download(trajectories.run_trajectory(run=run), trajectories.trajectory_filename("run", run.pk))


class AgentSessionTrajectoryView(TrajectoryEndpoint):
    """An interactive session's trajectory: one line per turn, in order, undone turns
    flagged."""

    @extend_schema(responses=LINES)
    def get(self, request, org_slug, project_slug, session_id):
        session = session_get(project=self.project, session_id=session_id)
        return self.download(
            trajectories.session_trajectory(session=session), trajectories.trajectory_filename("session", session.pk)
        )


class ConversationTrajectoryView(TrajectoryEndpoint):
    """An ingested conversation's trajectory (the runs sent with one `session_id`): one
    line per run, in start order."""

    @extend_schema(
        parameters=[OpenApiParameter("session", str, required=True, description="The conversation's session id.")],
        responses=LINES,
    )
    def get(self, request, org_slug, project_slug):
        session_id = request.query_params.get("session", "")
        if not session_id:
            raise InvalidRequest("name the conversation: ?session=<its session id>")
        if not trajectories.has_conversation(project=self.project, session_id=session_id):
            raise NotFound("session not found")
        return self.download(
            trajectories.conversation_trajectory(project=self.project, session_id=session_id),
            trajectories.trajectory_filename("conversation", session_id),
        )
