"""What the analyst was asked, and the run that answers it."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from agentops.scoping import TenantModel


class AnalystQuestion(TenantModel):
    """A question put to the analyst: about a run (asked on its page), or for the insights
    of a dataset's leaderboard. The answer is ``answer_run``, an executed run of the
    analyst (its output, steps, cost and stream); the question stays with its subject."""

    class Subject(models.TextChoices):
        RUN = "run"
        LEADERBOARD = "leaderboard"

    project = models.ForeignKey("agentops.Project", on_delete=models.CASCADE, related_name="+")
    subject = models.CharField(max_length=16, choices=Subject.choices)
    subject_run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    dataset = models.ForeignKey("evals.Dataset", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    question = models.TextField()
    answer_run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+")
    asked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["subject_run", "created_at"], name="analyst_q_run"),
            models.Index(fields=["dataset", "-created_at"], name="analyst_q_dataset"),
        ]

    def __str__(self) -> str:
        return f"{self.subject}: {self.question[:60]}"
