"""URLs of the server-rendered pages of the core. Organization pages live under
/o/<org_slug>/ and project pages under /o/<org_slug>/p/<project_slug>/; the runs,
evals, jobs and billing apps mount their own pages there (agentops/urls.py)."""

from django.urls import path

from agentops import url_prefixes
from agentops.views import audit, members, organization, projects, secrets, start

org = url_prefixes.PAGE_ORGANIZATION
project = url_prefixes.PAGE_PROJECT

urlpatterns = [
    path("", start.home, name="home"),
    path("orgs/new/", start.OrganizationCreatePage.as_view(), name="organization_create"),
    path("invitations/<str:token>/", start.InvitationAcceptPage.as_view(), name="invitation_accept"),
    # Organization
    path(f"{org}/", organization.OrganizationOverviewPage.as_view(), name="organization_detail"),
    path(f"{org}/members/", members.MembersPage.as_view(), name="members"),
    path(f"{org}/members/leave/", members.MemberLeaveAction.as_view(), name="member_leave"),
    path(f"{org}/members/<int:membership_id>/role/", members.MemberRoleChangeAction.as_view(), name="member_role"),
    path(f"{org}/members/<int:membership_id>/remove/", members.MemberRemoveAction.as_view(), name="member_remove"),
    path(
        f"{org}/invitations/<int:invitation_id>/revoke/",
        members.InvitationRevokeAction.as_view(),
        name="invitation_revoke",
    ),
    path(f"{org}/settings/", organization.OrganizationSettingsPage.as_view(), name="organization_settings"),
    path(f"{org}/settings/transfer/", organization.OrganizationTransferAction.as_view(), name="organization_transfer"),
    path(f"{org}/settings/delete/", organization.OrganizationDeleteAction.as_view(), name="organization_delete"),
    path(f"{org}/secrets/", secrets.ProviderSecretsPage.as_view(), name="secrets"),
    path(f"{org}/secrets/<str:provider>/delete/", secrets.ProviderSecretDeleteAction.as_view(), name="secret_delete"),
    path(f"{org}/audit/", audit.AuditLogPage.as_view(), name="audit_log"),
    # Project
    path(f"{project}/", projects.ProjectOverviewPage.as_view(), name="project_detail"),
    path(f"{project}/delete/", projects.ProjectDeleteAction.as_view(), name="project_delete"),
    path(f"{project}/api-keys/", projects.ApiKeysPage.as_view(), name="api_keys"),
    path(f"{project}/api-keys/<int:key_id>/revoke/", projects.ApiKeyRevokeAction.as_view(), name="api_key_revoke"),
]
