"""API of evaluations: evaluators."""

urlpatterns: list = []
