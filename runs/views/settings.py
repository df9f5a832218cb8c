"""The project's ingestion settings page: PII redaction rules and retention."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect

from agentops.errors import ServiceError
from agentops.pages import Need, ProjectPage, client_ip
from runs.forms import IngestSettingsForm
from runs.services.settings import ingest_settings_get, ingest_settings_update


class IngestSettingsPage(ProjectPage):
    """Every member sees the rules (they decide what is stored); admins and owners change them."""

    permissions = {
        "GET": Need("work:read", "see this project's ingestion settings"),
        "POST": Need("project:write", "change this project's ingestion settings"),
    }

    def get(self, request, org_slug, project_slug):
        settings = ingest_settings_get(project=self.project)
        form = IngestSettingsForm(
            initial={
                "redact": settings.redact,
                "custom_patterns": "\n".join(settings.custom_patterns),
                "retention_days": settings.retention_days,
                "wandb_logging": settings.wandb_logging,
            }
        )
        return self._render(form)

    def post(self, request, org_slug, project_slug):
        form = IngestSettingsForm(request.POST)
        if not form.is_valid():
            return self._render(form, status=400)
        try:
            ingest_settings_update(project=self.project, actor=request.user, ip=client_ip(request), **form.cleaned_data)
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self._render(form, status=exc.status)
        messages.success(request, "Ingestion settings saved; they apply to data stored from now on.")
        return redirect("runs:settings", org_slug=org_slug, project_slug=project_slug)

    def _render(self, form, status: int = 200):
        return self.render_page("runs/settings.html", {"form": form}, status=status)
