from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "evals"

    def ready(self):
        from evals.services.experiments import on_run_ended
        from runs.signals import run_ended

        run_ended.connect(on_run_ended, dispatch_uid="evals.experiment_run_ended")
