"""Pages of evaluations: datasets."""

from django.urls import path

from agentops.pages import Need, ProjectPage


class EvaluationsIndexPage(ProjectPage):
    permissions = {"GET": Need("work:read", "see this project's evaluations")}

    def get(self, request, org_slug, project_slug):
        return self.render_page("evals/index.html")


urlpatterns = [path("", EvaluationsIndexPage.as_view(), name="index")]


def dataset_panel_context(page, run) -> dict:
    """Context of templates/evals/_run_panel_dataset.html (the "add to dataset" form)."""
    return {}
