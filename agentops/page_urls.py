"""URLs of the server-rendered pages of the core. Organization pages live under
/o/<org_slug>/ and project pages under /o/<org_slug>/p/<project_slug>/; the runs,
evals, jobs and billing apps mount their own pages there (agentops/urls.py)."""

from django.urls import path

from agentops import views

org = "o/<slug:org_slug>"
project = f"{org}/p/<slug:project_slug>"

urlpatterns = [
    path("", views.home, name="home"),
    path("orgs/new/", views.OrganizationCreatePage.as_view(), name="organization_create"),
    path("invitations/<str:token>/", views.InvitationAcceptPage.as_view(), name="invitation_accept"),
    # Organization
    path(f"{org}/", views.OrganizationOverviewPage.as_view(), name="organization_detail"),
    path(f"{org}/members/", views.MembersPage.as_view(), name="members"),
    path(f"{org}/members/leave/", views.MemberLeaveAction.as_view(), name="member_leave"),
    path(f"{org}/members/<int:membership_id>/role/", views.MemberRoleChangeAction.as_view(), name="member_role"),
    path(f"{org}/members/<int:membership_id>/remove/", views.MemberRemoveAction.as_view(), name="member_remove"),
    path(
        f"{org}/invitations/<int:invitation_id>/revoke/",
        views.InvitationRevokeAction.as_view(),
        name="invitation_revoke",
    ),
    path(f"{org}/settings/", views.OrganizationSettingsPage.as_view(), name="organization_settings"),
    path(f"{org}/settings/transfer/", views.OrganizationTransferAction.as_view(), name="organization_transfer"),
    path(f"{org}/settings/delete/", views.OrganizationDeleteAction.as_view(), name="organization_delete"),
    path(f"{org}/secrets/", views.ProviderSecretsPage.as_view(), name="secrets"),
    path(f"{org}/secrets/<str:provider>/delete/", views.ProviderSecretDeleteAction.as_view(), name="secret_delete"),
    path(f"{org}/audit/", views.AuditLogPage.as_view(), name="audit_log"),
    # Project
    path(f"{project}/", views.ProjectOverviewPage.as_view(), name="project_detail"),
    path(f"{project}/delete/", views.ProjectDeleteAction.as_view(), name="project_delete"),
    path(f"{project}/api-keys/", views.ApiKeysPage.as_view(), name="api_keys"),
    path(f"{project}/api-keys/<int:key_id>/revoke/", views.ApiKeyRevokeAction.as_view(), name="api_key_revoke"),
]
