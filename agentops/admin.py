"""The Django admin for staff: tenancy models, searchable; the audit log read-only."""

from django.contrib import admin, messages

from agentops.models import ApiKey, AuditEvent, Invitation, Membership, Organization, Project, ProviderSecret
from agentops.pages import client_ip
from agentops.services.api_keys import api_key_revoke


class ReadOnlyAdmin(admin.ModelAdmin):
    """An admin entry staff can look at but never add to, change or delete from (records
    other code writes: the audit log, the ledger, applied recomputes)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "organization", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__email", "organization__slug"]
    autocomplete_fields = ["user", "organization"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "organization", "created_at"]
    search_fields = ["slug", "name", "organization__slug"]
    autocomplete_fields = ["organization"]


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = ["email", "organization", "role", "created_at", "expires_at", "accepted_at", "revoked_at"]
    search_fields = ["email", "organization__slug"]
    readonly_fields = ["token_hash"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are revoked, never deleted, as on the project's API keys page: the ledger
    names the key that spent what it spent, and deleting one would null its rows into the
    same day's unkeyed usage (``usage_daily_unique``: an IntegrityError). Revoking goes
    through ``api_key_revoke`` (the audit log), not by editing ``revoked_at``."""

    list_display = ["prefix", "name", "project", "organization", "scopes", "created_at", "last_used_at", "revoked_at"]
    search_fields = ["prefix", "name", "project__slug", "organization__slug"]
    readonly_fields = ["prefix", "key_hash", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Revoke the selected API keys")
    def revoke(self, request, queryset):
        revoked = 0
        for key in queryset.filter(revoked_at__isnull=True):
            api_key_revoke(key=key, actor=request.user, ip=client_ip(request))
            revoked += 1
        self.message_user(request, f"{revoked} API key(s) revoked.", messages.SUCCESS)


@admin.register(ProviderSecret)
class ProviderSecretAdmin(admin.ModelAdmin):
    list_display = ["organization", "provider", "api_key_hint", "base_url", "updated_at"]
    search_fields = ["organization__slug"]
    exclude = ["api_key_ciphertext"]
    readonly_fields = ["api_key_hint"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "organization_slug", "actor_label", "action", "target_label", "ip_address"]
    list_filter = ["action"]
    search_fields = ["organization_slug", "actor_label", "action", "target_label", "target_id"]
    date_hierarchy = "created_at"
