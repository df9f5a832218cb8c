"""The platform core: organizations, memberships, projects, invitations, API keys,
provider secrets, the audit log and idempotency records."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone

from agentops.crypto import EncryptedTextField
from agentops.roles import Role
from agentops.scoping import TenantModel


class Organization(models.Model):
    """A tenant. Every other row the platform stores belongs to one."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.slug


class Membership(TenantModel):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "user"], name="membership_unique_user"),
            models.CheckConstraint(condition=models.Q(role__in=Role.values), name="membership_role_valid"),
        ]
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization_id} as {self.role}"


class Project(TenantModel):
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["organization", "slug"], name="project_unique_slug")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.slug


class Invitation(TenantModel):
    """An invitation to join an organization. Only a hash of its token is stored."""

    email = models.EmailField()
    role = models.CharField(max_length=16, choices=Role.choices)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The email goes out from a task that retries (agentops.tasks.send_invitation_email):
    # sent when it left, else the last failure; final once the retries are spent.
    email_sent_at = models.DateTimeField(null=True, blank=True)
    email_attempts = models.PositiveSmallIntegerField(default=0)
    email_error = models.TextField(blank=True, default="")
    email_failed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One open invitation per address and organization.
            models.UniqueConstraint(
                "organization",
                Lower("email"),
                condition=models.Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="invitation_unique_open_email",
            ),
        ]
        ordering = ["-created_at", "-id"]

    @property
    def status(self) -> str:
        if self.accepted_at:
            return "accepted"
        if self.revoked_at and self.revoked_at < self.expires_at:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "pending"

    @property
    def email_status(self) -> str:
        """queued (not sent yet, retries included), sent, or failed (retries spent)."""
        if self.email_sent_at:
            return "sent"
        if self.email_failed_at:
            return "failed"
        return "queued"

    def __str__(self) -> str:
        return f"{self.email} ({self.role})"


class ApiKey(TenantModel):
    """A project API key. Only the SHA-256 of the key and its visible prefix are stored."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    scopes = ArrayField(models.CharField(max_length=16))
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())

    @property
    def status(self) -> str:
        if self.revoked_at:
            return "revoked"
        if self.expires_at and self.expires_at <= timezone.now():
            return "expired"
        return "active"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"


class ProviderSecret(TenantModel):
    """An organization's credentials for an LLM provider, the API key encrypted at rest."""

    class Provider(models.TextChoices):
        MISTRAL = "mistral", "Mistral"
        WANDB = "wandb", "Weights & Biases"

    provider = models.CharField(max_length=32, choices=Provider.choices)
    api_key_ciphertext = EncryptedTextField()
    api_key_hint = models.CharField(max_length=8, help_text="Last characters of the key, to recognise it.")
    base_url = models.URLField(blank=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["organization", "provider"], name="provider_secret_unique")]
        ordering = ["provider"]

    def __str__(self) -> str:
        return f"{self.provider} …{self.api_key_hint}"


class AuditEvent(TenantModel):
    """Append-only record of who did what. A database trigger refuses updates and
    deletes; events outlive the organization they describe (no foreign-key cascade).
    Platform-wide changes made by staff (public prices) have no organization: only staff
    read them, in the admin."""

    organization = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    organization_slug = models.CharField(max_length=50, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    actor_label = models.CharField(max_length=255, help_text="Email or API key prefix at the time.")
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    target_label = models.CharField(max_length=255, blank=True)
    data = models.JSONField(default=dict, blank=True)
    ip_address = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["organization", "-created_at"], name="audit_org_time")]

    def __str__(self) -> str:
        return f"{self.actor_label} {self.action} {self.target_label}"


class IdempotencyRecord(TenantModel):
    """The first response to a mutation sent with an ``Idempotency-Key`` header."""

    class State(models.TextChoices):
        IN_PROGRESS = "in_progress"
        COMPLETED = "completed"

    client = models.CharField(max_length=64, help_text="user:<id> or key:<id>: keys are per client.")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.IN_PROGRESS)
    response_status = models.PositiveSmallIntegerField(null=True)
    response_body = models.JSONField(null=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["organization", "client", "key"], name="idempotency_unique_key")]
