"""Pages of runs. Nothing is stored yet: the index is an empty state that says how to
send the first traces."""

from agentops.pages import Need, ProjectPage, otlp_endpoint


class RunsIndexPage(ProjectPage):
    permissions = {"GET": Need("work:read", "see this project's runs")}

    def get(self, request, org_slug, project_slug):
        return self.render_page("runs/index.html", {"otlp_endpoint": otlp_endpoint(request)})


index = RunsIndexPage.as_view()
