"""API of evaluations: annotations."""

urlpatterns: list = []
