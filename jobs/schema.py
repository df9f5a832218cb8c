"""OpenAPI description of the job token (drf-spectacular finds the extension once
this module is imported: jobs/apps.py does)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class JobTokenAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "jobs.auth.JobTokenAuthentication"
    name = "JobToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An evaluation job's own token (`AGENTOPS_JOB_TOKEN`): its job's items and results only.",
        }
