"""Pages of evaluations, mounted at /o/<org>/p/<project>/evals/: each feature's module
lists its own paths."""

from evals.views import annotations, datasets, evaluators, experiments, exports, online, run_panel, trajectory_push

app_name = "evals"
urlpatterns = [
    *datasets.urlpatterns,
    *evaluators.urlpatterns,
    *experiments.urlpatterns,
    *annotations.urlpatterns,
    *online.urlpatterns,
    *run_panel.urlpatterns,
    *exports.urlpatterns,
    *trajectory_push.urlpatterns,
]
