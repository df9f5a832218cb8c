"""Core API endpoints: organizations, members, invitations, projects, API keys,
provider secrets, audit log, and who-am-I."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from agentops import selectors
from agentops.api import serializers as s
from agentops.api.base import OrganizationEndpoint, ProjectEndpoint
from agentops.api.idempotency import idempotent
from agentops.errors import Forbidden, NotFound
from agentops.models import ApiKey, AuditEvent, Invitation, Membership, Project, ProviderSecret
from agentops.scoping import organization_scope
from agentops.services import api_keys, invitations, organizations, secrets


def _validated(serializer_class, data):
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class MeView(APIView):
    """Who is calling: the signed-in user with their organizations, or the API key
    with its project and scopes (a CI pipeline's check that its key works)."""

    @extend_schema(responses={200: dict})
    def get(self, request):
        if isinstance(request.auth, ApiKey):
            key = request.auth
            return Response(
                {
                    "type": "api_key",
                    "api_key": {
                        "id": key.pk,
                        "name": key.name,
                        "prefix": key.prefix,
                        "scopes": key.scopes,
                        "expires_at": key.expires_at,
                    },
                    "organization": key.organization.slug,
                    "project": key.project.slug,
                }
            )
        memberships = selectors.memberships_for_user(user=request.user)
        return Response(
            {
                "type": "user",
                "user": {"id": request.user.pk, "email": request.user.email},
                "organizations": [
                    {"slug": m.organization.slug, "name": m.organization.name, "role": m.role} for m in memberships
                ],
            }
        )


class OrganizationListView(APIView):
    """Organizations the signed-in user belongs to; create a new one (you become its owner)."""

    @extend_schema(responses=s.OrganizationSerializer(many=True))
    def get(self, request):
        self._refuse_keys(request)
        organizations_ = list(selectors.organizations_for_user(user=request.user))
        roles = dict(selectors.memberships_for_user(user=request.user).values_list("organization_id", "role"))
        return Response(s.OrganizationSerializer(organizations_, many=True, context={"roles": roles}).data)

    @extend_schema(request=s.OrganizationCreateSerializer, responses={201: s.OrganizationSerializer})
    def post(self, request):
        self._refuse_keys(request)
        data = _validated(s.OrganizationCreateSerializer, request.data)
        organization = organizations.organization_create(
            name=data["name"], slug=data.get("slug") or None, owner=request.user, ip=request.META.get("REMOTE_ADDR")
        )
        body = s.OrganizationSerializer(organization, context={"roles": {organization.pk: "owner"}}).data
        return Response(body, status=status.HTTP_201_CREATED)

    @staticmethod
    def _refuse_keys(request):
        if isinstance(request.auth, ApiKey):
            raise Forbidden("this endpoint needs a signed-in user; API keys cannot use it")


class OrganizationDetailView(OrganizationEndpoint):
    """One organization: read, rename, delete (owners; confirm with its slug)."""

    permissions = {"GET": "org:read", "PATCH": "org:write", "DELETE": "org:delete"}
    serializer_class = s.OrganizationSerializer

    def _body(self):
        return s.OrganizationSerializer(
            self.organization, context={"roles": {self.organization.pk: self.access.role}}
        ).data

    def get(self, request, org_slug):
        return Response(self._body())

    @extend_schema(request=s.OrganizationUpdateSerializer)
    def patch(self, request, org_slug):
        data = _validated(s.OrganizationUpdateSerializer, request.data)
        organizations.organization_update(
            organization=self.organization, actor=request.user, name=data["name"], ip=self.client_ip
        )
        return Response(self._body())

    @extend_schema(request=s.OrganizationDeleteSerializer, responses={204: None})
    def delete(self, request, org_slug):
        data = _validated(s.OrganizationDeleteSerializer, request.data)
        organizations.organization_delete(
            organization=self.organization, actor=request.user, confirm_slug=data["confirm"], ip=self.client_ip
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class TransferOwnershipView(OrganizationEndpoint):
    """Make another member the owner; you become an admin."""

    permissions = {"POST": "org:transfer"}
    serializer_class = s.TransferOwnershipSerializer

    @extend_schema(responses=s.MembershipSerializer)
    def post(self, request, org_slug):
        data = _validated(s.TransferOwnershipSerializer, request.data)
        target = Membership.objects.filter(pk=data["membership_id"]).first()
        if target is None:
            raise NotFound("member not found")
        new_owner = organizations.organization_transfer_ownership(
            actor_membership=self.access.membership, new_owner=target, ip=self.client_ip
        )
        return Response(s.MembershipSerializer(new_owner).data)


class MemberListView(OrganizationEndpoint):
    """Members of the organization with their roles."""

    permissions = {"GET": "member:read"}
    serializer_class = s.MembershipSerializer
    queryset = Membership.objects.select_related("user")

    def get(self, request, org_slug):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


class MemberDetailView(OrganizationEndpoint):
    """One member: change their role (admins: not owners), remove them, or leave."""

    permissions = {"GET": "member:read", "PATCH": "member:write", "DELETE": "org:read"}
    serializer_class = s.MembershipSerializer
    queryset = Membership.objects.select_related("user")
    lookup_url_kwarg = "membership_id"

    def get(self, request, org_slug, membership_id):
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(request=s.MembershipUpdateSerializer)
    def patch(self, request, org_slug, membership_id):
        data = _validated(s.MembershipUpdateSerializer, request.data)
        membership = organizations.membership_change_role(
            actor_membership=self.access.membership,
            membership=self.get_object(),
            role=data["role"],
            ip=self.client_ip,
        )
        return Response(self.get_serializer(membership).data)

    @extend_schema(responses={204: None})
    def delete(self, request, org_slug, membership_id):
        organizations.membership_remove(
            actor_membership=self.access.membership, membership=self.get_object(), ip=self.client_ip
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationListView(OrganizationEndpoint):
    """Invitations of the organization; invite someone by email with a role."""

    permissions = {"GET": "member:write", "POST": "member:write"}
    serializer_class = s.InvitationSerializer
    queryset = Invitation.objects.select_related("invited_by")

    def get(self, request, org_slug):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(request=s.InvitationCreateSerializer, responses={201: s.InvitationSerializer})
    @idempotent
    def post(self, request, org_slug):
        data = _validated(s.InvitationCreateSerializer, request.data)
        invitation, _token = invitations.invitation_create(
            actor_membership=self.access.membership,
            email=data["email"],
            role=data["role"],
            base_url=request.build_absolute_uri("/"),
            ip=self.client_ip,
        )
        return Response(self.get_serializer(invitation).data, status=status.HTTP_201_CREATED)


class InvitationDetailView(OrganizationEndpoint):
    """One invitation: read or revoke it."""

    permissions = {"GET": "member:write", "DELETE": "member:write"}
    serializer_class = s.InvitationSerializer
    queryset = Invitation.objects.select_related("invited_by")
    lookup_url_kwarg = "invitation_id"

    def get(self, request, org_slug, invitation_id):
        return Response(self.get_serializer(self.get_object()).data)

    def delete(self, request, org_slug, invitation_id):
        invitation = invitations.invitation_revoke(
            actor_membership=self.access.membership, invitation=self.get_object(), ip=self.client_ip
        )
        return Response(self.get_serializer(invitation).data)


class InvitationAcceptView(APIView):
    """Accept an invitation with the token from its link (signed-in user whose verified
    email is the invited address)."""

    @extend_schema(request=s.InvitationAcceptSerializer, responses={200: s.MembershipSerializer})
    def post(self, request):
        OrganizationListView._refuse_keys(request)
        data = _validated(s.InvitationAcceptSerializer, request.data)
        membership = invitations.invitation_accept(
            token=data["token"], user=request.user, ip=request.META.get("REMOTE_ADDR")
        )
        with organization_scope(membership.organization):
            return Response({"organization": membership.organization.slug, **s.MembershipSerializer(membership).data})


class ProjectListView(OrganizationEndpoint):
    """Projects of the organization; create one (admins and owners)."""

    permissions = {"GET": "project:read", "POST": "project:write"}
    serializer_class = s.ProjectSerializer
    queryset = Project.objects.select_related("organization")

    def get(self, request, org_slug):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(request=s.ProjectCreateSerializer, responses={201: s.ProjectSerializer})
    @idempotent
    def post(self, request, org_slug):
        data = _validated(s.ProjectCreateSerializer, request.data)
        project = organizations.project_create(
            organization=self.organization,
            actor=request.user,
            name=data["name"],
            slug=data.get("slug") or None,
            ip=self.client_ip,
        )
        return Response(self.get_serializer(project).data, status=status.HTTP_201_CREATED)


class ProjectDetailView(ProjectEndpoint):
    """One project: read (API keys with the read scope too), rename, delete."""

    permissions = {"GET": "project:read", "PATCH": "project:write", "DELETE": "project:write"}
    serializer_class = s.ProjectSerializer

    def get(self, request, org_slug, project_slug):
        return Response(self.get_serializer(self.project).data)

    @extend_schema(request=s.ProjectUpdateSerializer)
    def patch(self, request, org_slug, project_slug):
        data = _validated(s.ProjectUpdateSerializer, request.data)
        project = organizations.project_update(
            project=self.project, actor=request.user, name=data["name"], ip=self.client_ip
        )
        return Response(self.get_serializer(project).data)

    @extend_schema(responses={204: None})
    def delete(self, request, org_slug, project_slug):
        organizations.project_delete(project=self.project, actor=request.user, ip=self.client_ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ApiKeyListView(ProjectEndpoint):
    """API keys of the project; create one (the key is in the response, once)."""

    permissions = {"GET": "apikey:read", "POST": "apikey:write"}
    serializer_class = s.ApiKeySerializer
    queryset = ApiKey.objects.select_related("created_by")

    def get(self, request, org_slug, project_slug):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(request=s.ApiKeyCreateSerializer, responses={201: s.ApiKeyCreatedSerializer})
    def post(self, request, org_slug, project_slug):
        # Not idempotent on purpose: replaying the response would reveal the key again.
        data = _validated(s.ApiKeyCreateSerializer, request.data)
        key, raw_key = api_keys.api_key_create(
            project=self.project,
            actor=request.user,
            name=data["name"],
            scopes=data["scopes"],
            expires_at=data.get("expires_at"),
            ip=self.client_ip,
        )
        key.key = raw_key
        return Response(s.ApiKeyCreatedSerializer(key).data, status=status.HTTP_201_CREATED)


class ApiKeyDetailView(ProjectEndpoint):
    """One API key: read its metadata, or revoke it (refused from the next request on)."""

    permissions = {"GET": "apikey:read", "DELETE": "apikey:write"}
    serializer_class = s.ApiKeySerializer
    queryset = ApiKey.objects.select_related("created_by")
    lookup_url_kwarg = "key_id"

    def get(self, request, org_slug, project_slug, key_id):
        return Response(self.get_serializer(self.get_object()).data)

    def delete(self, request, org_slug, project_slug, key_id):
        key = api_keys.api_key_revoke(key=self.get_object(), actor=request.user, ip=self.client_ip)
        return Response(self.get_serializer(key).data)


class ProviderSecretListView(OrganizationEndpoint):
    """Saved provider credentials (never the key itself, only its last characters)."""

    permissions = {"GET": "secret:read"}
    serializer_class = s.ProviderSecretSerializer
    queryset = ProviderSecret.objects.select_related("updated_by")
    pagination_class = None

    def get(self, request, org_slug):
        return Response(self.get_serializer(self.get_queryset(), many=True).data)


class ProviderSecretDetailView(OrganizationEndpoint):
    """One provider's credentials: read the hint, set or replace them, delete them."""

    permissions = {"GET": "secret:read", "PUT": "secret:write", "DELETE": "secret:write"}
    serializer_class = s.ProviderSecretSerializer
    queryset = ProviderSecret.objects.select_related("updated_by")
    lookup_field = "provider"

    def get(self, request, org_slug, provider):
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(request=s.ProviderSecretWriteSerializer)
    def put(self, request, org_slug, provider):
        data = _validated(s.ProviderSecretWriteSerializer, request.data)
        secret = secrets.provider_secret_set(
            organization=self.organization,
            actor=request.user,
            provider=provider,
            api_key=data["api_key"],
            base_url=data.get("base_url", ""),
            ip=self.client_ip,
        )
        return Response(self.get_serializer(secret).data)

    @extend_schema(responses={204: None})
    def delete(self, request, org_slug, provider):
        secrets.provider_secret_delete(
            organization=self.organization, actor=request.user, provider=provider, ip=self.client_ip
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class AuditLogView(OrganizationEndpoint):
    """The organization's audit log, newest first."""

    permissions = {"GET": "audit:read"}
    serializer_class = s.AuditEventSerializer
    queryset = AuditEvent.objects.all()

    def filter_scoped_queryset(self, queryset):
        action = self.request.query_params.get("action")
        return queryset.filter(action__startswith=action) if action else queryset

    @extend_schema(parameters=[OpenApiParameter("action", str, description="Only actions starting with this")])
    def get(self, request, org_slug):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)
