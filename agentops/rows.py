"""Model instances from the rows of hand-written SQL, for the few hottest statements of
the workers (claiming a run, advancing an experiment) and of every API request (who is
asking, and where: agentops.access, the API key's lookup), where building and compiling
the ORM's query costs far more CPU than PostgreSQL spends on it (about 1-2 ms against 40
µs for a trivial statement). Each such statement is built once per process from the
models' fields (``columns``), so a new field is read like any other; the instances are
what a queryset makes of the same row (``instances``: each field's conversion, JSON
parsed). Tenant filters are the caller's (``agentops.scoping.organization_id_for_sql``)."""

from __future__ import annotations

from functools import cache

from django.db import connection


@cache
def loaded_fields(model, skip: tuple[str, ...] = ()) -> tuple:
    """The concrete fields of ``model`` a statement reads, in order: all but ``skip``
    (worked out once per process: ``instances`` asks for every row)."""
    return tuple(f for f in model._meta.concrete_fields if f.attname not in skip)


@cache
def _layout(model, skip: tuple[str, ...]) -> tuple[tuple, int, list[str]]:
    """``loaded_fields``, the primary key's position among them and their attribute names."""
    fields = loaded_fields(model, skip)
    return fields, next(i for i, f in enumerate(fields) if f.primary_key), [f.attname for f in fields]


def all_but(model, *keep: str) -> tuple[str, ...]:
    """The ``skip`` of ``model`` that reads only ``keep`` (attribute names) and its key."""
    return tuple(f.attname for f in model._meta.concrete_fields if not f.primary_key and f.attname not in keep)


def columns(model, alias: str, skip: tuple[str, ...] = ()) -> str:
    """``alias.column, ...`` of ``loaded_fields(model, skip)``, quoted."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(f.column)}" for f in loaded_fields(model, skip))


def instances(row, *parts: tuple[type, tuple[str, ...]]) -> list:
    """The instances of each ``(model, skip)`` in ``parts`` from ``row``, whose values come
    in that order (``columns`` of each); a part whose primary key is NULL (an outer join
    that found nothing) is None. Fields skipped are deferred, read when used."""
    made, start = [], 0
    for model, skip in parts:
        fields, pk_index, attnames = _layout(model, skip)
        values = row[start : start + len(fields)]
        start += len(fields)
        if values[pk_index] is None:
            made.append(None)
            continue
        values = [
            f.from_db_value(value, None, connection) if value is not None and hasattr(f, "from_db_value") else value
            for f, value in zip(fields, values, strict=True)
        ]
        made.append(model.from_db(connection.alias, attnames, values))
    return made
