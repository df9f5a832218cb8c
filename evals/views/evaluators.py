"""Pages of evaluations: evaluators."""

urlpatterns: list = []
