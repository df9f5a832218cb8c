"""Pages of runs, under /o/<org_slug>/p/<project_slug>/runs/ (see agentops/urls.py)."""

from django.urls import path

from runs.views import dashboard, run_detail, runs_list, sessions, settings

app_name = "runs"
run = "<int:run_id>"
urlpatterns = [
    path("", runs_list.RunsListPage.as_view(), name="index"),
    path("views/", runs_list.SavedViewCreateAction.as_view(), name="saved_view_create"),
    path("views/<int:view_id>/delete/", runs_list.SavedViewDeleteAction.as_view(), name="saved_view_delete"),
    path("dashboard/", dashboard.DashboardPage.as_view(), name="dashboard"),
    path("settings/", settings.IngestSettingsPage.as_view(), name="settings"),
    path("sessions/", sessions.SessionsPage.as_view(), name="sessions"),
    path("sessions/<path:session_id>/", sessions.SessionDetailPage.as_view(), name="session"),
    path(f"{run}/", run_detail.RunDetailPage.as_view(), name="detail"),
    path(f"{run}/live/", run_detail.RunLiveFragment.as_view(), name="detail_live"),
    path(f"{run}/steps/<int:step_id>/", run_detail.StepPanelFragment.as_view(), name="step"),
    path(
        f"{run}/values/<str:kind>/<int:object_id>/<str:field>/",
        run_detail.ValueFragment.as_view(),
        name="value",
    ),
]
