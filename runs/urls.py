"""Pages of runs, under /o/<org_slug>/p/<project_slug>/runs/ (see agentops/urls.py)."""

from django.urls import path, register_converter

from runs.views import agents, approvals, chat, compare, dashboard, replays, run_detail, runs_list, sessions, settings


class SessionIdConverter:
    """A session id is the agent's own text: any characters, newlines included (the
    ``path`` converter's ``.+`` stops at a newline, so such a session had no page).
    Links encode it as one segment, see ``runs_format.session_url``."""

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(SessionIdConverter, "session_id")

app_name = "runs"
run = "<int:run_id>"
urlpatterns = [
    path("", runs_list.RunsListPage.as_view(), name="index"),
    path("views/", runs_list.SavedViewCreateAction.as_view(), name="saved_view_create"),
    path("views/<int:view_id>/delete/", runs_list.SavedViewDeleteAction.as_view(), name="saved_view_delete"),
    path("dashboard/", dashboard.DashboardPage.as_view(), name="dashboard"),
    path("settings/", settings.IngestSettingsPage.as_view(), name="settings"),
    path("sessions/", sessions.SessionsPage.as_view(), name="sessions"),
    path("sessions/<session_id:session_id>/", sessions.SessionDetailPage.as_view(), name="session"),
    path("chat/", chat.ChatPage.as_view(), name="chat"),
    path("chat/new/", chat.ChatStartAction.as_view(), name="chat_start"),
    path("chat/<int:session_id>/", chat.ChatPage.as_view(), name="chat_session"),
    path("chat/<int:session_id>/live/", chat.ChatLiveFragment.as_view(), name="chat_live"),
    path("chat/<int:session_id>/messages/", chat.ChatSendAction.as_view(), name="chat_send"),
    path("chat/<int:session_id>/approvals/", chat.ChatDecideAction.as_view(), name="chat_decide"),
    path("chat/<int:session_id>/approve-all/", chat.ChatApproveAllAction.as_view(), name="chat_approve_all"),
    path("chat/<int:session_id>/approve-all/revoke/", chat.ChatRevokeAllAction.as_view(), name="chat_revoke_all"),
    path("chat/<int:session_id>/interrupt/", chat.ChatInterruptAction.as_view(), name="chat_interrupt"),
    path("chat/<int:session_id>/undo/", chat.ChatUndoAction.as_view(), name="chat_undo"),
    path("chat/<int:session_id>/compact/", chat.ChatCompactAction.as_view(), name="chat_compact"),
    path("chat/<int:session_id>/close/", chat.ChatCloseAction.as_view(), name="chat_close"),
    path(f"{run}/", run_detail.RunDetailPage.as_view(), name="detail"),
    path(f"{run}/live/", run_detail.RunLiveFragment.as_view(), name="detail_live"),
    path(f"{run}/steps/<int:step_id>/", run_detail.StepPanelFragment.as_view(), name="step"),
    path(
        f"{run}/values/<str:kind>/<int:object_id>/<str:field>/",
        run_detail.ValueFragment.as_view(),
        name="value",
    ),
    path(f"{run}/cancel/", agents.RunCancelAction.as_view(), name="cancel"),
    path(f"{run}/replays/", replays.ReplayStartAction.as_view(), name="replay_start"),
    path("agents/", agents.AgentsPage.as_view(), name="agents"),
    path("agents/<int:agent_id>/", agents.AgentDetailPage.as_view(), name="agent"),
    path("agents/<int:agent_id>/edit/", agents.AgentEditAction.as_view(), name="agent_edit"),
    path("agents/<int:agent_id>/runs/", agents.AgentRunStartAction.as_view(), name="agent_run_start"),
    path("agents/tools/", agents.WebhookToolsPage.as_view(), name="webhook_tools"),
    path("agents/tools/<int:tool_id>/delete/", agents.WebhookToolDeleteAction.as_view(), name="webhook_tool_delete"),
    path(f"{run}/approvals/<int:approval_id>/", approvals.RunApprovalDecideAction.as_view(), name="approval_decide"),
    path("compare/", compare.RunComparePage.as_view(), name="compare"),
]
