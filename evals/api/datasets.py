"""API of evaluations: datasets."""

urlpatterns: list = []
