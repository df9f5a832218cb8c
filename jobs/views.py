"""Pages of jobs (scheduled and batch agent work): coming; an empty state for now."""

from agentops.pages import Need, ProjectPage


class JobsIndexPage(ProjectPage):
    permissions = {"GET": Need("work:read", "see this project's jobs")}

    def get(self, request, org_slug, project_slug):
        return self.render_page("jobs/index.html")


index = JobsIndexPage.as_view()
