"""API of evaluations: online."""

urlpatterns: list = []
