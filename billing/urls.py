from django.urls import path

from billing import views

app_name = "billing"
urlpatterns = [
    path("", views.index, name="index"),
    path("budgets/", views.BudgetCreateAction.as_view(), name="budget_create"),
    path("budget-cost/", views.BudgetCostAction.as_view(), name="budget_cost"),
    path("budgets/<int:budget_id>/", views.BudgetEditPage.as_view(), name="budget_edit"),
    path("budgets/<int:budget_id>/delete/", views.BudgetDeleteAction.as_view(), name="budget_delete"),
]
