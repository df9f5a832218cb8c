"""Signals other apps listen to, so runs never imports them (evals scores an
experiment's item when its run ends)."""

from django.dispatch import Signal

# Sent by the executor once an executed run has ended and its end is stored (inside
# the caller's transaction, if any: receivers defer work with transaction.on_commit).
# Arguments: run (runs.models.Run), status (the run's final status).
run_ended = Signal()
