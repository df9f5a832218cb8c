"""Serializers of the core API. Output serializers never include a secret; input
serializers never accept an organization (it comes from the URL).

Every serializer of a request body inherits ``InputSerializer`` (or ``StrictFieldsMixin``),
in every app: a field it does not have is a 400 naming it, never silently dropped.
"""

from rest_framework import serializers
from rest_framework.settings import api_settings

from agentops.jsonsafe import unknown_fields
from agentops.models import ApiKey, AuditEvent, Invitation, Membership, Organization, Project, ProviderSecret
from agentops.roles import KEY_SCOPES, Role


def refuse_unknown_fields(data, accepted: list[str]) -> None:
    """A 400 naming every key of ``data`` that is not one of ``accepted``: the one rule
    of every request body, for the few endpoints that read a body without a serializer."""
    if problem := unknown_fields(data, accepted):
        raise serializers.ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [problem]}, code="unknown_field")


class StrictFieldsMixin:
    """Refuses a field the serializer does not have (or only reads), before any other
    check, at every level of nesting: a typo (``schema`` for ``parameters``) or a field
    of another endpoint (``session_id`` on a run start) must not be dropped silently."""

    def to_internal_value(self, data):
        refuse_unknown_fields(data, [name for name, field in self.fields.items() if not field.read_only])
        return super().to_internal_value(data)


class InputSerializer(StrictFieldsMixin, serializers.Serializer):
    """The base of every serializer of a request body."""


class OrganizationSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Organization
        fields = ["id", "name", "slug", "created_at", "role"]

    def get_role(self, organization) -> str | None:
        roles = self.context.get("roles", {})
        return roles.get(organization.pk)


class OrganizationCreateSerializer(InputSerializer):
    name = serializers.CharField(max_length=100)
    slug = serializers.SlugField(max_length=50, required=False, allow_blank=True)


class OrganizationUpdateSerializer(InputSerializer):
    name = serializers.CharField(max_length=100)


class OrganizationDeleteSerializer(InputSerializer):
    confirm = serializers.CharField(help_text="The organization's slug, to confirm.")


class UserSummarySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    email = serializers.EmailField()
    name = serializers.SerializerMethodField()

    def get_name(self, user) -> str:
        return user.get_full_name()


class MembershipSerializer(serializers.ModelSerializer):
    user = UserSummarySerializer(read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user", "role", "created_at"]


class MembershipUpdateSerializer(InputSerializer):
    role = serializers.ChoiceField(choices=Role.choices)


class TransferOwnershipSerializer(InputSerializer):
    membership_id = serializers.IntegerField(help_text="The member who becomes owner.")


class InvitationSerializer(serializers.ModelSerializer):
    invited_by = serializers.EmailField(source="invited_by.email", read_only=True, default=None)
    status = serializers.CharField(read_only=True)
    email_status = serializers.ChoiceField(
        choices=["queued", "sent", "failed"],
        read_only=True,
        help_text="queued: not sent yet (retried while the mail server fails); failed: retries spent, see email_error",
    )
    email_error = serializers.CharField(read_only=True)

    class Meta:
        model = Invitation
        fields = [
            "id",
            "email",
            "role",
            "status",
            "invited_by",
            "created_at",
            "expires_at",
            "accepted_at",
            "revoked_at",
            "email_status",
            "email_error",
        ]


class InvitationCreateSerializer(InputSerializer):
    email = serializers.EmailField()
    role = serializers.ChoiceField(choices=Role.choices)


class InvitationAcceptSerializer(InputSerializer):
    token = serializers.CharField()


class ProjectSerializer(serializers.ModelSerializer):
    organization = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Project
        fields = ["id", "organization", "name", "slug", "created_at"]


class ProjectCreateSerializer(InputSerializer):
    name = serializers.CharField(max_length=100)
    slug = serializers.SlugField(max_length=50, required=False, allow_blank=True)


class ProjectUpdateSerializer(InputSerializer):
    name = serializers.CharField(max_length=100)


class ApiKeySerializer(serializers.ModelSerializer):
    status = serializers.CharField(read_only=True)
    created_by = serializers.EmailField(source="created_by.email", read_only=True, default=None)

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "status",
            "created_by",
            "created_at",
            "last_used_at",
            "expires_at",
            "revoked_at",
        ]


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(help_text="The key itself. Shown only in this response; store it now.")

    class Meta(ApiKeySerializer.Meta):
        fields = ApiKeySerializer.Meta.fields + ["key"]


class ApiKeyCreateSerializer(InputSerializer):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=KEY_SCOPES), allow_empty=False)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class ProviderSecretSerializer(serializers.ModelSerializer):
    updated_by = serializers.EmailField(source="updated_by.email", read_only=True, default=None)

    class Meta:
        model = ProviderSecret
        fields = ["provider", "api_key_hint", "base_url", "updated_by", "created_at", "updated_at"]


class ProviderSecretWriteSerializer(InputSerializer):
    api_key = serializers.CharField(write_only=True, trim_whitespace=True)
    base_url = serializers.CharField(required=False, allow_blank=True, default="")


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_label")

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "actor",
            "action",
            "target_type",
            "target_id",
            "target_label",
            "data",
            "ip_address",
        ]
