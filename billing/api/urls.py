"""Routes of the billing API under /api/v1/."""

from django.urls import path

from agentops import url_prefixes
from billing.api import views

org = f"{url_prefixes.API_ORGANIZATION}/billing"
project = f"{url_prefixes.API_PROJECT}/billing"

urlpatterns = [
    path(f"{org}/spend/", views.OrganizationSpendView.as_view(), name="api-billing-spend"),
    path(f"{org}/budgets/", views.BudgetListView.as_view(), name="api-billing-budget-list"),
    path(f"{org}/budgets/<int:budget_id>/", views.BudgetDetailView.as_view(), name="api-billing-budget-detail"),
    path(f"{org}/alerts/", views.AlertListView.as_view(), name="api-billing-alert-list"),
    path(f"{project}/spend/", views.ProjectSpendView.as_view(), name="api-billing-project-spend"),
    path(f"{project}/budgets/", views.ProjectBudgetStatusView.as_view(), name="api-billing-project-budgets"),
]
