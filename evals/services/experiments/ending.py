"""Asking an experiment to end: ``experiment_cancel`` (a person), ``experiment_stop``
(its GPU job failed or was lost) and ``experiment_complete`` (an external harness is
done reporting). Each records the request under a lock (a conflict when the experiment
already ended), audits it, and advances the experiment, which ends once nothing is in
flight: what was scored is kept; items never started or never reported stay pending and
out of the numbers.
"""

from __future__ import annotations

from django.db import transaction

from agentops.errors import Conflict, InvalidRequest
from agentops.services.audit import audit_record
from evals.models import Experiment
from evals.services.experiments.advance import experiment_advance


def _ask_to_end(experiment: Experiment, change, *, action: str = "", actor=None, ip: str | None = None):
    """Lock an unfinished experiment, apply ``change`` (it sets fields and returns their
    names), audit ``action`` if given, then advance it (it ends when nothing is in flight)."""
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if experiment.ended:
            raise Conflict(f"the experiment already {experiment.status}")
        experiment.save(update_fields=[*change(experiment), "updated_at"])
        if action:
            audit_record(
                organization=experiment.project.organization, actor=actor, action=action, target=experiment, ip=ip
            )
    experiment_advance(experiment_id=experiment.pk)
    experiment.refresh_from_db()
    return experiment


def experiment_cancel(*, experiment: Experiment, actor, ip: str | None = None) -> Experiment:
    """Stop starting items and cancel the running ones; scored items are kept, items
    never started stay pending and out of the numbers."""

    def cancel(locked):
        locked.cancel_requested = True
        return ["cancel_requested"]

    return _ask_to_end(experiment, cancel, action="experiment.cancel", actor=actor, ip=ip)


def experiment_stop(*, experiment: Experiment, error: str) -> Experiment:
    """End an experiment as failed, keeping what was scored (its GPU job failed or was
    lost): like a cancel, with the reason."""

    def stop(locked):
        locked.cancel_requested = True
        locked.error = error[:5000]
        locked.metadata = {**locked.metadata, "stop_status": Experiment.Status.FAILED}
        return ["cancel_requested", "error", "metadata"]

    return _ask_to_end(experiment, stop)


def experiment_complete(*, experiment: Experiment, actor, ip: str | None = None) -> Experiment:
    """End an external experiment once the reported items are scored; items never
    reported stay pending and out of the numbers (its ``completion`` says how many)."""
    if experiment.kind != Experiment.Kind.EXTERNAL:
        raise InvalidRequest("only external experiments are completed by their harness")

    def complete(locked):
        locked.metadata = {**locked.metadata, "complete_requested": True}
        return ["metadata"]

    return _ask_to_end(experiment, complete, action="experiment.complete", actor=actor, ip=ip)
