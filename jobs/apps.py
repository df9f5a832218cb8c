from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"

    def ready(self):
        from jobs import schema  # noqa: F401 - registers the job token's OpenAPI description
