"""Tenant scoping: one mechanism that every query of tenant-owned rows goes through.

Every tenant-owned model inherits ``TenantModel``. Its default manager reads the
organization in scope (set by the API base view, the page mixin, the WebSocket
consumer or a task from the URL, the API key or the task's arguments) and filters by
it. A query made with no organization in scope raises ``UnscopedQueryError`` when it
touches the database, so a forgotten scope fails loudly in tests instead of leaking
another tenant's rows. The only way around it is ``dangerously_unscoped(reason)``,
used by staff tools and system-wide periodic tasks.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import models


class UnscopedQueryError(RuntimeError):
    """A tenant-owned model was queried with no organization in scope."""


_UNSCOPED = object()
_scope: contextvars.ContextVar[object] = contextvars.ContextVar("agentops_organization_scope", default=None)


def current_organization_id() -> int | None:
    """The id of the organization in scope, or None."""
    value = _scope.get()
    return value if isinstance(value, int) else None


@contextmanager
def organization_scope(organization) -> Iterator[None]:
    """Scope every tenant query inside the block to ``organization`` (object or id)."""
    organization_id = organization if isinstance(organization, int) else organization.pk
    token = _scope.set(organization_id)
    try:
        yield
    finally:
        _scope.reset(token)


def enter_organization_scope(organization) -> None:
    """Set the scope for the rest of the current context (a request handled by a view
    that reset the scope when it started, see ``agentops.api.base``)."""
    _scope.set(organization if isinstance(organization, int) else organization.pk)


@contextmanager
def reset_scope() -> Iterator[None]:
    """Start a block with no scope and restore the previous one afterwards."""
    token = _scope.set(None)
    try:
        yield
    finally:
        _scope.reset(token)


@contextmanager
def dangerously_unscoped(reason: str) -> Iterator[None]:
    """Allow queries across every organization. Only for staff tools and system tasks;
    ``reason`` documents why at the call site."""
    if not reason:
        raise ValueError("say why the query must cross organizations")
    token = _scope.set(_UNSCOPED)
    try:
        yield
    finally:
        _scope.reset(token)


def organization_id_for_sql() -> int | None:
    """The organization a hand-written statement of tenant-owned rows must filter by, as
    the managers do: the one in scope, or None inside ``dangerously_unscoped`` (no
    filter); with no organization in scope, UnscopedQueryError."""
    scope = _scope.get()
    if scope is None:
        raise UnscopedQueryError("a tenant-owned table is queried: do it inside organization_scope()")
    return scope if isinstance(scope, int) else None


def check_scope(organization_id: int) -> None:
    """For a read of one organization's rows that no ``TenantManager`` guards (raw SQL):
    raise ``UnscopedQueryError`` unless ``organization_id`` is the organization in scope
    or the block is ``dangerously_unscoped``."""
    scope = organization_id_for_sql()
    if scope is not None and scope != organization_id:
        raise UnscopedQueryError(f"organization {organization_id} is not the organization in scope")


class TenantQuerySet(models.QuerySet):
    """A queryset that refuses to run if it was built with no organization in scope."""

    _scope_missing = False

    def _clone(self):
        clone = super()._clone()
        clone._scope_missing = self._scope_missing
        return clone

    def _guard(self) -> None:
        if self._scope_missing:
            raise UnscopedQueryError(
                f"{self.model.__name__} is tenant-owned: query it inside organization_scope() "
                "(views and tasks do this for you) or dangerously_unscoped(reason)"
            )

    def check_scope(self) -> None:
        """Refuse as running this queryset would (``UnscopedQueryError``), for code that
        runs its compiled SQL itself."""
        self._guard()

    def in_current_scope(self):
        """This queryset re-scoped to the organization in scope now: for querysets
        declared at import time, like a view's ``queryset`` attribute."""
        scope = _scope.get()
        clone = self._chain()
        clone._scope_missing = scope is None
        if isinstance(scope, int):
            clone = clone.filter(organization_id=scope)
        return clone

    def _fetch_all(self):
        if self._result_cache is None:
            self._guard()
        return super()._fetch_all()

    def iterator(self, *args, **kwargs):
        self._guard()
        return super().iterator(*args, **kwargs)

    def count(self):
        self._guard()
        return super().count()

    def exists(self):
        self._guard()
        return super().exists()

    def aggregate(self, *args, **kwargs):
        self._guard()
        return super().aggregate(*args, **kwargs)

    def update(self, **kwargs):
        self._guard()
        return super().update(**kwargs)

    update.alters_data = True

    def delete(self):
        self._guard()
        return super().delete()

    delete.alters_data = True


class TenantManager(models.Manager.from_queryset(TenantQuerySet)):
    """Default manager of tenant-owned models: filters by the organization in scope."""

    def get_queryset(self):
        queryset = super().get_queryset()
        scope = _scope.get()
        if scope is _UNSCOPED:
            return queryset
        if scope is None:
            queryset._scope_missing = True
            return queryset
        return queryset.filter(organization_id=scope)


class TenantModel(models.Model):
    """Base of every row owned by an organization."""

    organization = models.ForeignKey(
        "agentops.Organization", on_delete=models.CASCADE, related_name="%(app_label)s_%(class)s_set"
    )

    objects = TenantManager()
    # Plain manager for Django internals and factories; code that serves users must
    # not use it (a ruff-visible name makes review easy).
    dangerously_unscoped_objects = models.Manager()  # noqa: DJ012 - both are managers

    class Meta:
        abstract = True
        base_manager_name = "dangerously_unscoped_objects"
