"""Pages of evaluations: experiments."""

urlpatterns: list = []
