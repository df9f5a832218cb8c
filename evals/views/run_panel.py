"""The evaluations panel of a run page (loaded by htmx from the run page, so the runs
app needs no import of evals): the run's scores, scoring it, adding it to an
annotation queue or to a dataset, pushing its trajectory to the Hugging Face Hub."""

from django.shortcuts import render
from django.urls import path

from agentops.pages import Need, ProjectPage
from evals.views.annotations import scores_panel_context
from evals.views.datasets import dataset_panel_context
from evals.views.trajectory_push import trajectory_panel_context
from runs import selectors as run_selectors


class RunEvalsPanel(ProjectPage):
    permissions = {"GET": Need("work:read", "see this run's scores")}

    def get(self, request, org_slug, project_slug, run_id):
        run = run_selectors.run_detail(project=self.project, run_id=run_id)
        context = {
            **self.page_context(),
            "run": run,
            **dataset_panel_context(self, run),
            **scores_panel_context(self, run),
            **trajectory_panel_context(self, run),
        }
        return render(request, "evals/_run_panel.html", context)


urlpatterns = [path("runs/<int:run_id>/panel/", RunEvalsPanel.as_view(), name="run-panel")]
