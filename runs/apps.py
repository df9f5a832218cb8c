from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self):
        # Billing, below runs, reads the usage of steps through the source runs registers
        # (billing/usage.py), never through runs' models.
        from billing.usage import register_usage_source
        from runs.usage import RunsUsageSource

        register_usage_source(RunsUsageSource())
