"""Pages of evaluations: annotations."""

urlpatterns: list = []


def scores_panel_context(page, run) -> dict:
    """Context of templates/evals/_run_panel_scores.html (the run's scores, scoring it)."""
    return {}
