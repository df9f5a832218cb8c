"""Pages of evaluations (datasets and experiments): coming; an empty state for now."""

from agentops.pages import Need, ProjectPage


class EvaluationsIndexPage(ProjectPage):
    permissions = {"GET": Need("work:read", "see this project's evaluations")}

    def get(self, request, org_slug, project_slug):
        return self.render_page("evals/index.html")


index = EvaluationsIndexPage.as_view()
