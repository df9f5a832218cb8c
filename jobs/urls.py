"""Pages of GPU jobs, mounted at /o/<org>/p/<project>/jobs/ (agentops/urls.py)."""

from django.urls import path

from jobs import views

job = "<int:job_id>"
app_name = "jobs"
urlpatterns = [
    path("", views.JobsIndexPage.as_view(), name="index"),
    path("new/", views.NewJobPage.as_view(), name="new"),
    path("new/estimate/", views.JobEstimateFragment.as_view(), name="estimate"),
    path(f"{job}/", views.JobPage.as_view(), name="detail"),
    path(f"{job}/live/", views.JobLiveFragment.as_view(), name="live"),
    path(f"{job}/row/", views.JobRowFragment.as_view(), name="row"),
    path(f"{job}/log/", views.JobLogView.as_view(), name="log"),
    path(f"{job}/metrics/", views.JobMetricsView.as_view(), name="metrics"),
    path(f"{job}/cancel/", views.JobCancelAction.as_view(), name="cancel"),
]
