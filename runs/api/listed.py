"""The fast path of the runs API's long lists (runs, a run's steps): ``ListedSerializer``
gives DRF's ``to_representation`` without its per-value machinery, and ``read`` reads
rows for it without model instances (only the columns its fields read, JSON columns as
their stored text written into the answer as they are). The serializers of the runs API
(``runs.api.serializers``) build on it; the tests compare both paths field for field
with DRF's own (docs/performance.md, "Reads at 1M steps")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import EmptyResultSet
from django.db import connections, models
from django.db.models import JSONField, TextField
from django.db.models.functions import Cast
from django.utils import timezone
from psycopg.types.datetime import TimestamptzLoader
from rest_framework import ISO_8601, serializers
from rest_framework.settings import api_settings

from agentops.api.renderers import RawJSON

# Fields whose representation of a non-None value is a plain conversion (DRF's own
# ``to_representation`` of each, spelled as the builtin it calls).
_PLAIN = {
    serializers.CharField: str,
    serializers.IntegerField: int,
    serializers.FloatField: float,
}


def _plain(field):
    kind = type(field)
    if kind in _PLAIN:
        return _PLAIN[kind]
    if kind is serializers.BigIntegerField and not getattr(
        field, "coerce_to_string", api_settings.COERCE_BIGINT_TO_STRING
    ):
        return int
    if kind is serializers.BooleanField:
        return _boolean(field)
    if kind is serializers.DecimalField:
        return _decimal(field)
    if kind is serializers.JSONField and not field.binary:
        return None  # the value as stored
    if kind is serializers.DateTimeField and getattr(field, "format", api_settings.DATETIME_FORMAT) == ISO_8601:
        return _iso_datetime(field)
    return field.to_representation


def _boolean(field):
    """A boolean column's value as it is; anything else goes through the field."""

    def convert(value):
        return value if type(value) is bool else field.to_representation(value)

    return convert


def _decimal(field):
    """DRF's decimal string of a value that already has the field's decimal places (as
    a ``numeric`` column of that scale loads it): quantizing it changes nothing, so it is
    written as it is; anything else goes through the field."""
    coerce = getattr(field, "coerce_to_string", api_settings.COERCE_DECIMAL_TO_STRING)
    if not coerce or field.localize or field.normalize_output or field.decimal_places is None:
        return field.to_representation
    exponent, max_digits = -field.decimal_places, field.max_digits

    def convert(value):
        if type(value) is Decimal:
            _, digits, value_exponent = value.as_tuple()
            if value_exponent == exponent and (max_digits is None or len(digits) <= max_digits):
                return f"{value:f}"
        return field.to_representation(value)

    return convert


def _iso_datetime(field):
    """DRF's ISO 8601 representation of a datetime (in the field's or the current time
    zone, UTC as "Z"), with the time zone looked up once rather than once per value;
    anything but an aware datetime goes through the field."""
    zone = field.timezone if hasattr(field, "timezone") else field.default_timezone()
    if zone is None:
        return field.to_representation

    def convert(value):
        if type(value) is not datetime or value.tzinfo is None:
            return field.to_representation(value)
        text = value.astimezone(zone).isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text

    return convert


class ListedRow:
    """A row read for a ``ListedSerializer``: ``listed_values`` holds its columns in the
    field order of the serializer class that read it. Each such class reads its rows as
    a subclass of its own (``ListedSerializer.listed_row_class``) in which a column reads
    as an attribute named by its source (a JSON column as ``RawJSON``); the caller may
    set other attributes (a step's depth)."""

    __slots__ = ("listed_values", "__dict__")


def _column(position: int, raw: bool) -> property:
    """The attribute of a ``ListedRow`` that reads column ``position`` (as ``RawJSON`` if
    ``raw``): a property, a fraction of the cost of looking a name up on each miss (the
    step tree reads two ids of every step)."""
    if raw:

        def read(row):
            value = row.listed_values[position]
            return None if value is None else RawJSON(value)

    else:

        def read(row):
            return row.listed_values[position]

    return property(read)


@dataclass(frozen=True)
class _Columns:
    """What ``ListedSerializer.read`` selects: the sources of the fields that are model
    columns (in field order), the selected names (a JSON column by an alias of its text),
    the text casts, and the JSON columns."""

    sources: list[str]
    selected: list[str]
    texts: dict
    raw: frozenset[str]


def _statement(queryset):
    """The statement of a ``values_list`` queryset as Django would run it (tenant scope
    checked first): ``(sql, params)``, None when it can match no row, or False when a
    column needs Django's own conversion of its values."""
    check_scope = getattr(queryset, "check_scope", None)
    if check_scope is not None:
        check_scope()
    compiler = queryset.query.get_compiler(using=queryset.db)
    try:
        statement = compiler.as_sql()
    except EmptyResultSet:
        return None
    if compiler.get_converters([expression for expression, _, _ in compiler.select]):
        return False
    return statement


def _execute(cursor, statement) -> None:
    """Run ``statement`` on Django's ``cursor`` (logged and counted as Django runs its
    own) with timestamps loaded by psycopg's own loader instead of Django's subclass of
    its pure-Python one: the same aware datetimes (Django's connections are in UTC),
    about three times faster over a 500-step run."""
    cursor.cursor.adapters.register_loader("timestamptz", TimestamptzLoader)
    cursor.execute(*statement)


def _order(cursor, names: list[str]) -> list[int] | None:
    """The positions of ``names`` among the columns of the statement ``cursor`` ran, None
    when they are in that order already (Django selects annotations after the model's
    columns)."""
    fetched = [column.name for column in cursor.description]
    return None if fetched == names else [fetched.index(name) for name in names]


def _fetch_rows(queryset, names: list[str]) -> list[tuple]:
    """The rows of a ``values_list`` queryset of the columns ``names`` (in that order),
    times loaded as ``_execute`` loads them; a column Django would convert falls back to
    Django."""
    statement = _statement(queryset)
    if statement is None:
        return []
    if statement is False:
        return list(queryset)
    with connections[queryset.db].cursor() as cursor:
        _execute(cursor, statement)
        order = _order(cursor, names)
        rows = cursor.fetchall()
    return rows if order is None else [tuple(row[position] for position in order) for row in rows]


def _stream_rows(queryset, names: list[str], chunk_size: int) -> Iterator[tuple]:
    """The rows of a ``values_list`` queryset of the columns ``names`` (in that order),
    ``chunk_size`` at a time through a server-side cursor, as ``QuerySet.iterator`` reads
    them but with timestamps loaded as ``_execute`` loads them (an export of 8,192 runs
    spent about 40% of its time in Django's loader). Runs when first iterated."""
    statement = _statement(queryset)
    if statement is None:
        return
    if statement is False:
        yield from queryset.iterator(chunk_size=chunk_size)
        return
    with connections[queryset.db].chunked_cursor() as cursor:
        _execute(cursor, statement)
        order = _order(cursor, names)
        while rows := cursor.fetchmany(chunk_size):
            if order is None:
                yield from rows
            else:
                for row in rows:
                    yield tuple(row[position] for position in order)


class ListedSerializer(serializers.ModelSerializer):
    """An output serializer for long lists (runs, a run's steps): the representation
    DRF's ``to_representation`` gives, without its per-value machinery. Each field is
    read with one ``getattr`` of its source and converted by a function chosen once per
    serializer (plain types by their builtin, JSON as stored, the rest by the field's
    own ``to_representation``); None stays None, as in DRF. The fields are built once
    per class, not per request (they are read-only and take no context). At 500 steps
    of 30 fields DRF's generic path was most of the steps endpoint's time.

    ``read(queryset)`` reads rows for it without model instances: only the columns its
    fields read, and JSON columns as their stored text, written into the answer as they
    are (``RawJSON``) instead of being parsed and encoded again. Such rows are rendered
    by ``agentops.api.renderers.JSONRenderer``. Their representation starts from the
    row's values in field order, converting only the columns whose stored type is not
    already the answer's (times, decimals, arrays)."""

    @classmethod
    def listed_fields(cls) -> list:
        fields = cls.__dict__.get("_listed_fields")
        if fields is None:
            fields = [field for field in cls().fields.values() if not field.write_only]
            cls._listed_fields = fields
        return fields

    @classmethod
    def listed_columns(cls) -> _Columns:
        columns = cls.__dict__.get("_listed_columns")
        if columns is None:
            model_columns = {field.attname: field for field in cls.Meta.model._meta.concrete_fields}
            sources, selected, texts = [], [], {}
            for field in cls.listed_fields():
                column = model_columns.get(field.source)
                if column is None or field.source in sources:
                    continue
                sources.append(field.source)
                if isinstance(column, JSONField):
                    alias = f"listed_{field.source}"
                    texts[alias] = Cast(field.source, TextField())
                    selected.append(alias)
                else:
                    selected.append(field.source)
            columns = cls._listed_columns = _Columns(
                sources=sources,
                selected=selected,
                texts=texts,
                raw=frozenset(source for source, name in zip(sources, selected, strict=True) if name in texts),
            )
        return columns

    @classmethod
    def read(cls, queryset, limit: int | None = None) -> list[ListedRow]:
        """The rows of ``queryset`` (of the serializer's model; at most ``limit``) as
        ``ListedRow`` objects holding the model columns this serializer's fields read; a
        field that is no column (a step's depth) is for the caller to set."""
        columns = cls.listed_columns()
        rows = queryset.annotate(**columns.texts).values_list(*columns.selected)
        if limit is not None:
            rows = rows[:limit]
        values = _fetch_rows(rows, columns.selected)
        row_class = cls.listed_row_class()
        new = row_class.__new__
        out = []
        for row_values in values:
            row = new(row_class)
            row.listed_values = row_values
            out.append(row)
        return out

    @classmethod
    def listed_row_class(cls) -> type[ListedRow]:
        """The class of the rows ``read`` gives: ``ListedRow`` with an attribute per column."""
        row_class = cls.__dict__.get("_listed_row_class")
        if row_class is None:
            columns = cls.listed_columns()
            attributes = {
                source: _column(position, source in columns.raw) for position, source in enumerate(columns.sources)
            }
            row_class = cls._listed_row_class = type(
                f"{cls.__name__}Row", (ListedRow,), {"__slots__": (), **attributes}
            )
        return row_class

    @classmethod
    def represent(cls, rows) -> list[dict]:
        """The representation of ``rows``, as ``cls(rows, many=True).data`` gives it, as
        a plain list. DRF's list serializer binds its child to itself and its answer to
        both, so the answer and every row it was built from stay in a reference cycle
        until the garbage collector's next pass; nothing in this list refers back, and
        it is freed with the response (docs/performance.md, "Answers freed when sent").
        One serializer per class and current time zone (which its times are written in)
        does the work: its plan of the fields is built once."""
        represent_one = cls._listed_child().to_representation
        return [represent_one(row) for row in rows]

    @classmethod
    def stream(cls, queryset, chunk_size: int) -> Iterator[dict]:
        """The representations of ``queryset``'s rows, read as ``read`` reads them (the
        columns the fields read, JSON as its stored text, times by psycopg's loader) but
        ``chunk_size`` at a time through a server-side cursor: for an export of any length.
        The time zone is the caller's, taken now (the rows are read later, as the
        answer is sent)."""
        columns = cls.listed_columns()
        rows = queryset.annotate(**columns.texts).values_list(*columns.selected)
        row_class = cls.listed_row_class()
        represent_one = cls._listed_child().to_representation

        def represented() -> Iterator[dict]:
            new = row_class.__new__
            for values in _stream_rows(rows, columns.selected, chunk_size):
                row = new(row_class)
                row.listed_values = values
                yield represent_one(row)

        return represented()

    @classmethod
    def _listed_child(cls) -> ListedSerializer:
        """The serializer that represents this class's rows in the current time zone."""
        children = cls.__dict__.get("_listed_children")
        if children is None:
            children = cls._listed_children = {}
        zone = timezone.get_current_timezone()
        child = children.get(zone)
        if child is None:
            child = children[zone] = cls()
        return child

    def _listed_plan(self):
        plan = self.__dict__.get("_plan")
        if plan is None:
            fields = self.listed_fields()
            # A dotted or "*" source goes through DRF (none here today).
            if any(field.source == "*" or "." in field.source for field in fields):
                plan = self._plan = False
            else:
                plan = self._plan = [(field.field_name, field.source, _plain(field)) for field in fields]
        return plan

    def _row_plan(self, model):
        """For rows from ``read``: the field names of the columns (in field order, as
        ``listed_values`` holds them), the columns to convert, and the fields that are
        no column (last); None when the fields do not allow it."""
        plan = self.__dict__.get("_row_plan_cache")
        if plan is None:
            plan = self._row_plan_cache = _row_plan(
                self.listed_fields(), self._listed_plan(), model, self.listed_columns().raw
            )
        return plan

    def to_representation(self, instance):
        if type(instance) is type(self).__dict__.get("_listed_row_class"):
            row_plan = self._row_plan(type(self).Meta.model)
            if row_plan is not None:
                names, converted, extra = row_plan
                out = dict(zip(names, instance.listed_values, strict=True))
                for name, convert in converted:
                    value = out[name]
                    if value is not None:
                        out[name] = convert(value)
                for name, source, convert in extra:
                    value = getattr(instance, source)
                    out[name] = value if value is None or convert is None else convert(value)
                return out
        plan = self._listed_plan()
        if plan is False:
            return super().to_representation(instance)
        out = {}
        for name, source, convert in plan:
            value = getattr(instance, source)
            out[name] = value if value is None or convert is None else convert(value)
        return out


# The Python type psycopg loads each kind of column as, and the serializer field whose
# representation of that type is the value itself.
_AS_LOADED = {
    models.CharField: (serializers.CharField, str),
    models.TextField: (serializers.CharField, str),
    models.IntegerField: (serializers.IntegerField, int),
    models.BigIntegerField: (serializers.IntegerField, int),
    models.BigAutoField: (serializers.IntegerField, int),
    models.AutoField: (serializers.IntegerField, int),
    models.PositiveIntegerField: (serializers.IntegerField, int),
    models.FloatField: (serializers.FloatField, float),
}


def _row_plan(fields, plan, model, raw):
    if plan is False:
        return None
    columns = {field.attname: field for field in model._meta.concrete_fields}
    names, converted, extra, seen = [], [], [], set()
    for field, (name, source, convert) in zip(fields, plan, strict=True):
        column = columns.get(source)
        if column is None:
            extra.append((name, source, convert))
            continue
        if extra or source in seen:
            return None  # a column after a field that is none, or read twice: the general path
        seen.add(source)
        names.append(name)
        if source in raw:
            converted.append((name, RawJSON))  # read as its JSON text
        elif convert is not None and not _as_loaded(field, column, convert):
            converted.append((name, convert))
    return names, converted, extra


def _as_loaded(field, column, convert) -> bool:
    """Whether ``convert`` leaves the value psycopg loads for ``column`` as it is."""
    if isinstance(column, models.BooleanField):
        return type(field) is serializers.BooleanField
    if type(field) is serializers.ChoiceField:
        # A text column's choices: each value represents as itself.
        return isinstance(column, models.CharField) and all(
            type(key) is str and field.choice_strings_to_values[key] == key for key in field.choice_strings_to_values
        )
    for kind in type(column).__mro__:
        if kind in _AS_LOADED:
            field_kind, builtin = _AS_LOADED[kind]
            return convert is builtin and isinstance(field, field_kind)
    return False
