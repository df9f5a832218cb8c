from django.urls import path

from agentops import url_prefixes
from agentops.api import views

org = url_prefixes.API_ORGANIZATION
project = url_prefixes.API_PROJECT

urlpatterns = [
    path("me/", views.MeView.as_view(), name="api-me"),
    path("organizations/", views.OrganizationListView.as_view(), name="api-organization-list"),
    path(f"{org}/", views.OrganizationDetailView.as_view(), name="api-organization-detail"),
    path(f"{org}/transfer-ownership/", views.TransferOwnershipView.as_view(), name="api-transfer-ownership"),
    path(f"{org}/members/", views.MemberListView.as_view(), name="api-member-list"),
    path(f"{org}/members/<int:membership_id>/", views.MemberDetailView.as_view(), name="api-member-detail"),
    path(f"{org}/invitations/", views.InvitationListView.as_view(), name="api-invitation-list"),
    path(f"{org}/invitations/<int:invitation_id>/", views.InvitationDetailView.as_view(), name="api-invitation-detail"),
    path("invitations/accept/", views.InvitationAcceptView.as_view(), name="api-invitation-accept"),
    path(f"{org}/projects/", views.ProjectListView.as_view(), name="api-project-list"),
    path(f"{org}/provider-secrets/", views.ProviderSecretListView.as_view(), name="api-provider-secret-list"),
    path(
        f"{org}/provider-secrets/<str:provider>/",
        views.ProviderSecretDetailView.as_view(),
        name="api-provider-secret-detail",
    ),
    path(f"{org}/audit-log/", views.AuditLogView.as_view(), name="api-audit-log"),
    path(f"{project}/", views.ProjectDetailView.as_view(), name="api-project-detail"),
    path(f"{project}/api-keys/", views.ApiKeyListView.as_view(), name="api-api-key-list"),
    path(f"{project}/api-keys/<int:key_id>/", views.ApiKeyDetailView.as_view(), name="api-api-key-detail"),
]
