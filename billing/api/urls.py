"""Routes of the billing API under /api/v1/."""

from django.urls import path

from billing.api import views

org = "organizations/<slug:org_slug>/billing"
project = "projects/<slug:org_slug>/<slug:project_slug>/billing"

urlpatterns = [
    path(f"{org}/spend/", views.OrganizationSpendView.as_view(), name="api-billing-spend"),
    path(f"{org}/budgets/", views.BudgetListView.as_view(), name="api-billing-budget-list"),
    path(f"{org}/budgets/<int:budget_id>/", views.BudgetDetailView.as_view(), name="api-billing-budget-detail"),
    path(f"{org}/alerts/", views.AlertListView.as_view(), name="api-billing-alert-list"),
    path(f"{project}/spend/", views.ProjectSpendView.as_view(), name="api-billing-project-spend"),
    path(f"{project}/budgets/", views.ProjectBudgetStatusView.as_view(), name="api-billing-project-budgets"),
]
