"""Pages of evaluations: online."""

urlpatterns: list = []
