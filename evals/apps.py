from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "evals"

    def ready(self):
        from evals.services.experiments import on_run_ended
        from evals.services.wandb_export import on_run_ended as log_run_to_wandb
        from runs.signals import run_ended

        run_ended.connect(on_run_ended, dispatch_uid="evals.experiment_run_ended")
        run_ended.connect(log_run_to_wandb, dispatch_uid="evals.wandb_run_ended")
