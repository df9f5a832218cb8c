"""Roles and what each may do. The one table the server checks; docs/roles.md shows it."""

from django.db import models


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


ALL = frozenset(Role)
ADMINS = frozenset({Role.OWNER, Role.ADMIN})
WORKERS = frozenset({Role.OWNER, Role.ADMIN, Role.MEMBER})

# permission -> roles that hold it
PERMISSIONS: dict[str, frozenset[str]] = {
    "org:read": ALL,
    "org:write": ADMINS,  # rename, settings
    "org:delete": frozenset({Role.OWNER}),
    "org:transfer": frozenset({Role.OWNER}),
    "member:read": ALL,
    "member:write": ADMINS,  # invite, change roles and remove (admins: not owners)
    "member:owners": frozenset({Role.OWNER}),  # grant, change or remove the owner role
    "project:read": ALL,
    "project:write": ADMINS,
    "apikey:read": ADMINS,
    "apikey:write": ADMINS,
    "secret:read": ADMINS,
    "secret:write": ADMINS,
    "billing:read": ADMINS,  # spend and budget status (the billing page, the billing API)
    "budget:write": ADMINS,
    "audit:read": ADMINS,
    # Bulk exports copy all of a project's data out of the platform, with the
    # organization's storage credentials: the same people who hold those credentials.
    "export:write": ADMINS,
    "work:read": ALL,  # runs, replays, datasets, experiments, jobs
    "work:write": WORKERS,
    "run:ingest": WORKERS,
}

# API keys belong to one project and carry scopes instead of a role.
# permission -> key scope that grants it; permissions not listed are never open to keys.
KEY_SCOPE_FOR_PERMISSION: dict[str, str] = {
    "project:read": "read",
    "work:read": "read",
    "billing:read": "read",  # the key's own project's spend and budget status
    "work:write": "execute",
    "run:ingest": "ingest",
}
KEY_SCOPES = ("ingest", "read", "execute")

# How far each role may reach when assigning roles to others.
RANK = {Role.OWNER: 3, Role.ADMIN: 2, Role.MEMBER: 1, Role.VIEWER: 0}


def role_allows(role: str, permission: str) -> bool:
    """Whether ``role`` holds ``permission``. Unknown permissions are refused."""
    return role in PERMISSIONS.get(permission, frozenset())


def key_allows(scopes: list[str], permission: str) -> bool:
    """Whether an API key with ``scopes`` holds ``permission``."""
    scope = KEY_SCOPE_FOR_PERMISSION.get(permission)
    return scope is not None and scope in scopes
