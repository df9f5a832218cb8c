"""Saved views of the runs list: a member names the filters they use often; everyone in
the project sees the view, only its owner deletes it."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from agentops.errors import Conflict, Forbidden, InvalidRequest
from runs.models import SavedView

MAX_SAVED_VIEWS_PER_OWNER = 50


def saved_view_create(*, project, owner, name: str, query: str) -> SavedView:
    """Save ``query`` (the list's filters as a query string) under ``name`` for ``owner``."""
    name = name.strip()
    if not name:
        raise InvalidRequest("give the view a name")
    if len(query) > SavedView._meta.get_field("query").max_length:
        raise InvalidRequest("these filters are too long to save")
    # A soft cap (two concurrent saves may both pass it): it only keeps the list usable.
    if SavedView.objects.filter(project=project, owner=owner).count() >= MAX_SAVED_VIEWS_PER_OWNER:
        raise InvalidRequest(f"you already have {MAX_SAVED_VIEWS_PER_OWNER} saved views; delete one first")
    try:
        with transaction.atomic():
            return SavedView.objects.create(
                organization_id=project.organization_id, project=project, owner=owner, name=name, query=query
            )
    except IntegrityError:
        raise Conflict(f"you already have a view named “{name}”") from None


def saved_view_delete(*, saved_view: SavedView, actor) -> None:
    """Delete ``saved_view``; only the member who saved it may."""
    if saved_view.owner_id != actor.pk:
        raise Forbidden("only the member who saved a view can delete it")
    saved_view.delete()
