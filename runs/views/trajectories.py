"""The pages' "Download trajectory" links: a run, an interactive session or an ingested
conversation as JSON Lines (``runs.trajectories``, the same lines as the API's), for
anyone who may see the project's runs."""

from __future__ import annotations

from django.http import Http404

from agentops.pages import Need, ProjectPage
from runs import selectors, trajectories
from runs.services.sessions import session_get

READ = Need("work:read", "download this project's trajectories")


class TrajectoryDownload(ProjectPage):
    permissions = {"GET": READ}

    def download(self, request, lines, filename: str):
        return trajectories.download(request, lines, organization=self.organization, filename=filename)


class RunTrajectoryDownload(TrajectoryDownload):
    """One run's trajectory (one line)."""

    def get(self, request, org_slug, project_slug, run_id):
        run = selectors.run_detail(project=self.project, run_id=run_id)
        filename = trajectories.trajectory_filename("run", run.pk)
        return self.download(request, trajectories.run_trajectory(run=run), filename)


class AgentSessionTrajectoryDownload(TrajectoryDownload):
    """An interactive session's trajectory (one line per turn)."""

    def get(self, request, org_slug, project_slug, session_id):
        session = session_get(project=self.project, session_id=session_id)
        return self.download(
            request,
            trajectories.session_trajectory(session=session),
            trajectories.trajectory_filename("session", session.pk),
        )


class ConversationTrajectoryDownload(TrajectoryDownload):
    """An ingested conversation's trajectory (``?session=``: one line per run)."""

    def get(self, request, org_slug, project_slug):
        session_id = request.GET.get("session", "")
        if not session_id or not trajectories.has_conversation(project=self.project, session_id=session_id):
            raise Http404("session not found")
        return self.download(
            request,
            trajectories.conversation_trajectory(project=self.project, session_id=session_id),
            trajectories.trajectory_filename("conversation", session_id),
        )
