"""API of evaluations under /api/v1/projects/{org}/{project}/: each feature's module
lists its own paths."""

from evals.api import annotations, datasets, evaluators, experiments, exports, online

urlpatterns = [
    *datasets.urlpatterns,
    *evaluators.urlpatterns,
    *experiments.urlpatterns,
    *annotations.urlpatterns,
    *online.urlpatterns,
    *exports.urlpatterns,
]
