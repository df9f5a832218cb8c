from django.urls import path

from agentops import url_prefixes
from runs import sse
from runs.api import agents, approvals, batch, compare, replays, sessions, settings, trajectories, views

project = url_prefixes.API_PROJECT
run = f"{project}/runs/<int:run_id>"
session = f"{project}/agent-sessions/<int:session_id>"

urlpatterns = [
    path("ingest", batch.IngestView.as_view(), name="api-ingest"),
    path(f"{project}/runs/", views.RunListView.as_view(), name="api-run-list"),
    path(f"{run}/cancel/", agents.RunCancelView.as_view(), name="api-run-cancel"),
    path(f"{run}/approvals/", approvals.RunApprovalsView.as_view(), name="api-run-approvals"),
    path(f"{run}/replays/", replays.RunReplaysView.as_view(), name="api-run-replays"),
    path(f"{project}/agents/", agents.AgentListView.as_view(), name="api-agent-list"),
    path(f"{project}/agents/<int:agent_id>/", agents.AgentDetailView.as_view(), name="api-agent-detail"),
    path(
        f"{project}/agents/<int:agent_id>/versions/", agents.AgentVersionListView.as_view(), name="api-agent-versions"
    ),
    path(f"{project}/tools/", agents.ToolListView.as_view(), name="api-tool-list"),
    path(f"{project}/webhook-tools/", agents.WebhookToolListView.as_view(), name="api-webhook-tool-list"),
    path(
        f"{project}/webhook-tools/<int:tool_id>/",
        agents.WebhookToolDetailView.as_view(),
        name="api-webhook-tool-detail",
    ),
    path(f"{project}/runs/export/", views.RunExportView.as_view(), name="api-run-export"),
    path(
        f"{project}/runs/trajectory/",
        trajectories.ConversationTrajectoryView.as_view(),
        name="api-conversation-trajectory",
    ),
    path(f"{run}/", views.RunDetailView.as_view(), name="api-run-detail"),
    path(f"{run}/steps/", views.RunStepListView.as_view(), name="api-run-steps"),
    path(f"{run}/messages/", views.RunMessageListView.as_view(), name="api-run-messages"),
    path(f"{run}/tool-calls/", views.RunToolCallListView.as_view(), name="api-run-tool-calls"),
    path(f"{run}/memory/", views.RunMemoryListView.as_view(), name="api-run-memory"),
    path(f"{run}/trajectory/", trajectories.RunTrajectoryView.as_view(), name="api-run-trajectory"),
    path(f"{project}/ingest-settings/", settings.IngestSettingsView.as_view(), name="api-ingest-settings"),
    path(f"{project}/sessions/", views.SessionListView.as_view(), name="api-session-list"),
    # Session ids are the client's: `path` so one with a slash (sent as %2F) still matches.
    path(f"{project}/sessions/<path:session_id>/", views.SessionDetailView.as_view(), name="api-session-detail"),
    path(f"{project}/agent-sessions/", sessions.AgentSessionListView.as_view(), name="api-agent-session-list"),
    path(f"{session}/", sessions.AgentSessionDetailView.as_view(), name="api-agent-session-detail"),
    path(f"{session}/messages/", sessions.SessionMessageView.as_view(), name="api-agent-session-messages"),
    path(f"{session}/approvals/", sessions.SessionApprovalView.as_view(), name="api-agent-session-approvals"),
    path(f"{session}/approve-all/", sessions.SessionApproveAllView.as_view(), name="api-agent-session-approve-all"),
    path(f"{session}/interrupt/", sessions.SessionInterruptView.as_view(), name="api-agent-session-interrupt"),
    path(f"{session}/undo/", sessions.SessionUndoView.as_view(), name="api-agent-session-undo"),
    path(f"{session}/compact/", sessions.SessionCompactView.as_view(), name="api-agent-session-compact"),
    path(f"{session}/close/", sessions.SessionCloseView.as_view(), name="api-agent-session-close"),
    path(f"{session}/events/", sse.session_events, name="api-agent-session-events"),
    path(
        f"{session}/trajectory/",
        trajectories.AgentSessionTrajectoryView.as_view(),
        name="api-agent-session-trajectory",
    ),
    path(f"{run}/events/", sse.run_events, name="api-run-events"),
    path(f"{project}/compare/", compare.RunCompareView.as_view(), name="api-run-compare"),
]
