"""API of evaluations: experiments."""

urlpatterns: list = []
