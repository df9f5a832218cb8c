"""The organization's billing page: usage and budgets will live here; an empty state
for now. Admins and owners only."""

from agentops.pages import Need, OrganizationPage


class BillingIndexPage(OrganizationPage):
    # roles.py has no billing permission yet; "org:write" is held by exactly the roles
    # billing is for (owners and admins).
    permissions = {"GET": Need("org:write", "see billing")}

    def get(self, request, org_slug):
        return self.render_page("billing/index.html")


index = BillingIndexPage.as_view()
