"""The organization's compute settings (backends and job secrets), mounted at
/o/<org>/compute/ (agentops/urls.py)."""

from django.urls import path

from jobs import views

app_name = "jobs_org"
urlpatterns = [
    path("", views.ComputeSettingsPage.as_view(), name="index"),
    path("backends/", views.BackendCreateAction.as_view(), name="backend_create"),
    path("backends/<int:backend_id>/", views.BackendUpdateAction.as_view(), name="backend_update"),
    path("backends/<int:backend_id>/enabled/", views.BackendEnableAction.as_view(), name="backend_enable"),
    path("secrets/", views.JobSecretSetAction.as_view(), name="secret_set"),
    path("secrets/<str:name>/delete/", views.JobSecretDeleteAction.as_view(), name="secret_delete"),
]
