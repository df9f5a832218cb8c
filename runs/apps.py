from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self):
        # Billing, below runs, reads the usage of steps through the source runs registers
        # (billing/usage.py), never through runs' models.
        from billing.usage import register_usage_source
        from runs.usage import RunsUsageSource

        register_usage_source(RunsUsageSource())

        from runs.signals import run_ended

        run_ended.connect(_turn_ended, dispatch_uid="runs.sessions.turn_ended")


def _turn_ended(sender, run, status, **kwargs):
    """A session's turn ended: its next queued message starts (runs.services.sessions)."""
    if getattr(run, "agent_session_id", None) is None:
        return
    from runs.services.sessions import turn_ended

    turn_ended(run=run)
