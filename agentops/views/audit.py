"""The organization's audit log."""

from django.core.paginator import Paginator

from agentops import selectors
from agentops.forms import (
    AuditFilterForm,
)
from agentops.pages import Need, OrganizationPage

AUDIT_PAGE_SIZE = 50


class AuditLogPage(OrganizationPage):
    """Who did what, newest first, filterable by the start of the action name."""

    permissions = {"GET": Need("audit:read", "read the audit log")}

    def get(self, request, org_slug):
        form = AuditFilterForm(request.GET)
        action = form.cleaned_data["action"].strip() if form.is_valid() else ""
        events = selectors.audit_event_list(organization=self.organization, action=action or None)
        page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
        return self.render_page("agentops/audit_log.html", {"form": form, "page": page, "action": action})
