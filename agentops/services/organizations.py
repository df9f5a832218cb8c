"""Organizations, memberships and projects: every write that changes who may do what."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.utils.text import slugify

from agentops import live
from agentops.errors import Conflict, Forbidden, InvalidRequest
from agentops.models import Membership, Organization, Project
from agentops.roles import RANK, Role, role_allows
from agentops.scoping import organization_scope
from agentops.services.audit import audit_record

RESERVED_SLUGS = {"new", "api", "admin", "accounts", "static", "settings", "invitations"}


def _slug_for(name: str, slug: str | None) -> str:
    value = slugify(slug or name)[:50].strip("-")
    if not value:
        raise InvalidRequest("the name must contain letters or digits to make a slug")
    if value in RESERVED_SLUGS:
        raise InvalidRequest(f"the slug '{value}' is reserved; choose another")
    return value


def organization_create(*, name: str, owner, slug: str | None = None, ip: str | None = None) -> Organization:
    """Create an organization with ``owner`` as its first owner."""
    name = name.strip()
    if not name:
        raise InvalidRequest("the organization needs a name")
    slug = _slug_for(name, slug)
    try:
        with transaction.atomic():
            organization = Organization.objects.create(name=name, slug=slug)
            with organization_scope(organization):
                Membership.objects.create(organization=organization, user=owner, role=Role.OWNER)
                audit_record(
                    organization=organization, actor=owner, action="organization.create", target=organization, ip=ip
                )
    except IntegrityError:
        raise Conflict(f"the slug '{slug}' is taken; choose another") from None
    return organization


def organization_update(*, organization: Organization, actor, name: str, ip: str | None = None) -> Organization:
    """Rename an organization (its slug, used in URLs and API keys' paths, stays)."""
    _rename(organization, organization=organization, actor=actor, name=name, ip=ip)
    return organization


def _rename(target: Organization | Project, *, organization: Organization, actor, name: str, ip: str | None) -> None:
    """Rename an organization or a project: save the name, audit the change, and tell
    open pages (the element ``organization-name`` or ``project-name``)."""
    kind = target._meta.model_name
    name = name.strip()
    if not name:
        raise InvalidRequest(f"the {kind} needs a name")
    with transaction.atomic():
        old = target.name
        target.name = name
        target.save(update_fields=["name"])
        audit_record(
            organization=organization,
            actor=actor,
            action=f"{kind}.update",
            target=target,
            data={"name": [old, name]},
            ip=ip,
        )
        _announce_name(element_id=f"{kind}-name", name=name, **{kind: target})


def _announce_name(*, element_id: str, name: str, organization=None, project=None) -> None:
    """Tell open pages a name changed, once the change is committed."""
    html = render_to_string("agentops/live/name.html", {"element_id": element_id, "name": name, "oob": True})
    event = "project.renamed" if project is not None else "organization.renamed"
    transaction.on_commit(
        lambda: live.announce(organization=organization, project=project, event=event, html=html, data={"name": name})
    )


def organization_delete(*, organization: Organization, actor, confirm_slug: str, ip: str | None = None) -> None:
    """Delete an organization and everything it owns. The audit log keeps its events."""
    if confirm_slug != organization.slug:
        raise InvalidRequest(f"type the organization's slug '{organization.slug}' to confirm deletion")
    with transaction.atomic():
        _recheck_live_access(Membership.objects.filter(organization=organization).values_list("user_id", flat=True))
        audit_record(organization=organization, actor=actor, action="organization.delete", target=organization, ip=ip)
        organization.delete()


def _recheck_live_access(user_ids) -> None:
    """Once the change is committed, make these users' open live sockets check their
    access again, so a removed or downgraded member stops hearing what they may no
    longer read within moments (agentops/consumers.py)."""
    user_ids = list(user_ids)
    transaction.on_commit(lambda: live.access_changed(user_ids))


def _owner_count(organization: Organization) -> int:
    # Lock the owners' rows so two concurrent demotions cannot both pass the check.
    return len(
        Membership.objects.select_for_update()
        .filter(organization=organization, role=Role.OWNER)
        .values_list("id", flat=True)
    )


def _check_can_manage(actor_membership: Membership, target: Membership, new_role: str | None) -> None:
    if not role_allows(actor_membership.role, "member:write"):
        raise Forbidden(f"your role ({actor_membership.role}) cannot manage members")
    touches_owner = target.role == Role.OWNER or new_role == Role.OWNER
    if touches_owner and not role_allows(actor_membership.role, "member:owners"):
        raise Forbidden("only an owner can grant, change or remove the owner role")


def membership_change_role(
    *, actor_membership: Membership, membership: Membership, role: str, ip: str | None = None
) -> Membership:
    """Change a member's role. The last owner cannot be demoted."""
    if role not in Role.values:
        raise InvalidRequest(f"unknown role '{role}'; choose one of {', '.join(Role.values)}")
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        actor_membership = Membership.objects.get(pk=actor_membership.pk)
        _check_can_manage(actor_membership, membership, role)
        if membership.role == role:
            return membership
        if membership.role == Role.OWNER and _owner_count(membership.organization) <= 1:
            raise Conflict("the last owner cannot be demoted; make someone else owner first")
        old = membership.role
        membership.role = role
        membership.save(update_fields=["role"])
        _recheck_live_access([membership.user_id])
        audit_record(
            organization=membership.organization,
            actor=actor_membership.user,
            action="member.role_change",
            target=membership.user,
            data={"role": [old, role]},
            ip=ip,
        )
    return membership


def membership_remove(*, actor_membership: Membership, membership: Membership, ip: str | None = None) -> None:
    """Remove a member, or let a member leave. The last owner cannot leave."""
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        leaving = membership.user_id == actor_membership.user_id
        if not leaving:
            _check_can_manage(Membership.objects.get(pk=actor_membership.pk), membership, None)
        if membership.role == Role.OWNER and _owner_count(membership.organization) <= 1:
            raise Conflict("the last owner cannot leave; make someone else owner or delete the organization")
        membership.delete()
        _recheck_live_access([membership.user_id])
        audit_record(
            organization=membership.organization,
            actor=actor_membership.user,
            action="member.leave" if leaving else "member.remove",
            target=membership.user,
            data={"role": membership.role},
            ip=ip,
        )


def organization_transfer_ownership(
    *, actor_membership: Membership, new_owner: Membership, ip: str | None = None
) -> Membership:
    """Make ``new_owner`` an owner and the acting owner an admin."""
    if not role_allows(actor_membership.role, "org:transfer"):
        raise Forbidden("only an owner can transfer ownership")
    if new_owner.pk == actor_membership.pk:
        raise InvalidRequest("choose another member to transfer ownership to")
    with transaction.atomic():
        new_owner = Membership.objects.select_for_update().get(pk=new_owner.pk)
        actor_membership = Membership.objects.select_for_update().get(pk=actor_membership.pk)
        if actor_membership.role != Role.OWNER:
            raise Forbidden("only an owner can transfer ownership")
        new_owner.role = Role.OWNER
        new_owner.save(update_fields=["role"])
        actor_membership.role = Role.ADMIN
        actor_membership.save(update_fields=["role"])
        _recheck_live_access([actor_membership.user_id, new_owner.user_id])
        audit_record(
            organization=actor_membership.organization,
            actor=actor_membership.user,
            action="organization.transfer_ownership",
            target=new_owner.user,
            ip=ip,
        )
    return new_owner


def role_can_assign(actor_role: str, role: str) -> bool:
    """Whether a member with ``actor_role`` may give someone ``role``."""
    if role == Role.OWNER:
        return role_allows(actor_role, "member:owners")
    return role_allows(actor_role, "member:write") and RANK[Role(role)] <= RANK[Role(actor_role)]


def project_create(
    *, organization: Organization, actor, name: str, slug: str | None = None, ip: str | None = None
) -> Project:
    """Create a project in ``organization``."""
    name = name.strip()
    if not name:
        raise InvalidRequest("the project needs a name")
    slug = _slug_for(name, slug)
    try:
        with transaction.atomic():
            project = Project.objects.create(organization=organization, name=name, slug=slug)
            audit_record(organization=organization, actor=actor, action="project.create", target=project, ip=ip)
    except IntegrityError:
        raise Conflict(f"a project with the slug '{slug}' already exists in this organization") from None
    return project


def project_update(*, project: Project, actor, name: str, ip: str | None = None) -> Project:
    """Rename a project (its slug stays: it is in every URL and exporter setting)."""
    _rename(project, organization=project.organization, actor=actor, name=name, ip=ip)
    return project


def project_delete(*, project: Project, actor, ip: str | None = None) -> None:
    """Delete a project and everything in it."""
    with transaction.atomic():
        audit_record(organization=project.organization, actor=actor, action="project.delete", target=project, ip=ip)
        _recheck_live_access(
            Membership.objects.filter(organization_id=project.organization_id).values_list("user_id", flat=True)
        )
        project.delete()
