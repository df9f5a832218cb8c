"""Forms of the server-rendered pages. They only parse input: every rule about what
may change lives in the services, whose errors the views attach to these forms."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from django import forms

from agentops import jsonsafe
from agentops.models import ProviderSecret
from agentops.roles import KEY_SCOPES, Role
from agentops.services.organizations import role_can_assign

SCOPE_HELP = {
    "ingest": "ingest: send traces and runs",
    "read": "read: read runs, evaluations and jobs",
    "execute": "execute: start replays, experiments and jobs",
}


def version_field(label: str) -> forms.IntegerField:
    """A version number to pick (a dataset's, an agent's); left blank, the latest."""
    return forms.IntegerField(
        label=label,
        required=False,
        min_value=1,
        help_text="Blank: the latest version.",
        widget=forms.NumberInput(attrs={"placeholder": "latest"}),
    )


def json_object(text: str, what: str) -> dict:
    """A form field's text as a JSON object ({} when empty), or a ValidationError that
    names the field (``what``, as it starts a sentence: "The settings", "Metadata"): the
    one parser of the JSON textareas of every form."""
    text = (text or "").strip()
    if not text:
        return {}
    value = json_value(text)
    if not isinstance(value, dict):
        raise forms.ValidationError(f"{what} must be a JSON object.")
    return value


def json_value(text: str):
    """A form field's text parsed as any JSON value by ``agentops.jsonsafe.loads`` (bounded
    depth, nothing PostgreSQL cannot store), or a ValidationError saying what is wrong."""
    try:
        return jsonsafe.loads(text)
    except jsonsafe.UnreadableJSON as exc:
        raise forms.ValidationError(f"This JSON cannot be used: {exc}.") from None
    except ValueError as exc:
        raise forms.ValidationError(f"This is not valid JSON: {exc}.") from None


def assignable_roles(actor_role: str) -> list[tuple[str, str]]:
    """The roles a member with ``actor_role`` may give others, highest first."""
    return [(role.value, role.label) for role in Role if role_can_assign(actor_role, role.value)]


class OrganizationCreateForm(forms.Form):
    name = forms.CharField(max_length=100, widget=forms.TextInput(attrs={"autofocus": True}))
    slug = forms.SlugField(
        max_length=50, required=False, help_text="Used in URLs. Leave empty to derive it from the name."
    )


class OrganizationRenameForm(forms.Form):
    name = forms.CharField(max_length=100)


class OrganizationDeleteForm(forms.Form):
    confirm = forms.CharField(label="Type the organization's slug to confirm", max_length=50)


class TransferOwnershipForm(forms.Form):
    membership = forms.TypedChoiceField(label="New owner", coerce=int)

    def __init__(self, *args, memberships=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["membership"].choices = [
            (membership.pk, f"{membership.user.email} ({membership.get_role_display()})") for membership in memberships
        ]


class ProjectCreateForm(forms.Form):
    name = forms.CharField(max_length=100)
    slug = forms.SlugField(
        max_length=50, required=False, help_text="Used in URLs and exporter settings; it cannot change later."
    )


class ProjectRenameForm(forms.Form):
    name = forms.CharField(max_length=100)


class ProjectDeleteForm(forms.Form):
    confirm = forms.CharField(label="Type the project's slug to confirm", max_length=50)


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Where the key is used, e.g. “production worker”.")
    scopes = forms.MultipleChoiceField(
        choices=[(scope, SCOPE_HELP[scope]) for scope in KEY_SCOPES],
        widget=forms.CheckboxSelectMultiple,
        initial=["ingest"],
    )
    expires_on = forms.DateField(
        required=False,
        label="Valid until",
        help_text="Optional. The key works through this day (UTC).",
        widget=forms.DateInput(attrs={"type": "date"}),
    )

    def clean_expires_on(self):
        day = self.cleaned_data.get("expires_on")
        # The key stops at the end of the day, midnight after it: the calendar's last day
        # has none (an OverflowError, a 500, when it was computed).
        if day is not None and day >= date.max:
            raise forms.ValidationError(
                f"Choose a day before {date.max.isoformat()}, or leave it empty for a key that does not expire."
            )
        return day

    def expires_at(self) -> datetime | None:
        """The end of the chosen day, UTC: the first moment the key no longer works."""
        day = self.cleaned_data.get("expires_on")
        if day is None:
            return None
        return datetime.combine(day + timedelta(days=1), time.min, tzinfo=UTC)


class InvitationCreateForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField()

    def __init__(self, *args, actor_role: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["role"].choices = assignable_roles(actor_role)
        self.fields["role"].initial = Role.MEMBER


class RoleChangeForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class ProviderSecretForm(forms.Form):
    provider = forms.ChoiceField(choices=ProviderSecret.Provider.choices)
    api_key = forms.CharField(
        label="API key",
        max_length=500,
        strip=True,
        # Never sent back to the browser, not even after a failed submission.
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
    )
    base_url = forms.URLField(
        label="Base URL",
        required=False,
        assume_scheme="https",
        help_text="Optional: a compatible endpoint instead of the provider's own. For W&B, only a server "
        "the operator allows (WANDB_ALLOWED_BASE_URLS).",
    )


class AuditFilterForm(forms.Form):
    action = forms.CharField(
        required=False,
        max_length=64,
        label="Action starts with",
        widget=forms.TextInput(attrs={"placeholder": "e.g. api_key. or member."}),
    )
