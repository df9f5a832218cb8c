"""What PostgreSQL can store, and JSON read from outside: every JSON document a request
carries (the API's bodies, the pages' JSON textareas, uploaded files) is parsed by
``loads`` and every value bound for a jsonb or text column is checked by
``storage_problem``, so a bad value is a clear 400 rather than a database error or a
RecursionError (a 500). A query string is checked by ``query_problem`` (the API's
endpoints and the pages, before anything is looked up).

What must be stored rather than refused (telemetry, what the platform produced itself)
goes through one cleaner with two variants, chosen by name: ``storable_lossy`` (NaN
and Infinity become null) and ``storable_lossless`` (kept as text). ``json_from_text``
reads the JSON a text holds (tool arguments, telemetry attributes).

The checks walk values with an explicit stack, never by recursion: a document nested
10,000 levels deep costs no Python stack, and is refused for its depth.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# numeric(18, 9): money columns hold less than a billion.
MAX_MONEY = 10**9
MAX_BIGINT = 2**63 - 1
# The deepest JSON the platform takes: the document itself is level 1. Deeper data is
# refused, never cut: nothing an agent or a client sends needs more, and every later
# reader (the renderer, the pages, the diff) stays within Python's recursion limit.
MAX_DEPTH = 64

NUL = "contains a NUL character, which cannot be stored"
SURROGATE = "contains an unpaired surrogate (invalid Unicode)"
NOT_FINITE = "NaN and Infinity are not valid JSON numbers"


class UnreadableJSON(ValueError):
    """JSON that ``loads`` refuses; the message says what and where. A ValueError, so
    code that caught json.loads' errors catches these too."""


def _string_problem(value: str) -> str:
    if "\x00" in value:
        return NUL
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return SURROGATE
    return ""


def child_path(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = printable(key, 60)
    return f"{path}.{key}" if path else key


def printable(value: str, limit: int = 200) -> str:
    """``value`` safe to echo in a message (and to store in jsonb): no NUL, no unpaired
    surrogate, bounded length."""
    value = value[:limit].replace("\x00", "\ufffd")
    return value.encode("utf-8", "replace").decode("utf-8")


def _path(chain: tuple | None) -> str:
    """The path of a (key, parent chain) linked list: "a.b[2]"."""
    keys = []
    while chain is not None:
        key, chain = chain
        keys.append(key)
    path = ""
    for key in reversed(keys):
        path = child_path(path, key)
    return path


def value_problem(value: Any, *, max_depth: int = MAX_DEPTH, root: str = "the object") -> str:
    """The first thing in ``value`` (in document order) that PostgreSQL cannot store or
    that is nested deeper than ``max_depth``, as "path: problem" ("problem" at the top;
    ``root`` names the top for a bad key), or "". ``value`` itself is level 1."""
    # Each entry: the value, its depth, and its path as a linked list (a path is only
    # spelled out for the problem found, so a large document costs no string building).
    stack: list[tuple[Any, int, tuple | None]] = [(value, 1, None)]
    while stack:
        item, depth, chain = stack.pop()
        problem = ""
        if isinstance(item, dict | list | tuple):
            if depth > max_depth:
                problem = f"nested deeper than {max_depth} levels"
            elif isinstance(item, dict):
                for key in item:
                    if key_problem := _string_problem(key if isinstance(key, str) else str(key)):
                        return f"{_path(chain) or root}: a key {key_problem}"
                # Reversed so the first problem in document order is the one reported.
                stack.extend((child, depth + 1, (key, chain)) for key, child in reversed(item.items()))
                continue
            else:
                stack.extend((item[index], depth + 1, (index, chain)) for index in range(len(item) - 1, -1, -1))
                continue
        elif isinstance(item, str):
            problem = _string_problem(item)
        elif isinstance(item, float):
            problem = "" if math.isfinite(item) else NOT_FINITE
        elif not (item is None or isinstance(item, bool | int)):
            problem = f"not JSON: a {type(item).__name__}"
        if problem:
            where = _path(chain)
            return f"{where}: {problem}" if where else problem
    return ""


def storage_problem(value: Any) -> str:
    """Why PostgreSQL would refuse ``value`` in a jsonb (or text) column, or ""."""
    return value_problem(value)


def _refuse_constant(name: str):
    raise UnreadableJSON(f"{name} is not a JSON number ({NOT_FINITE})")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e999: a JSON number no float holds
        raise UnreadableJSON(f"{printable(text, 40)} is too large for a number")
    return number


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]")
_BRACKETS = str.maketrans("[{]}", "(())")
# A JSON escape of a NUL or of a surrogate (paired ones too: those are checked after).
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def _deeper_than(text: str, max_depth: int) -> bool:
    """Whether valid JSON ``text`` nests deeper than ``max_depth``, at C speed: with the
    strings taken out and only brackets left, each pass of replace() removes the
    innermost pairs, so a document of depth d is empty after d passes."""
    brackets = _NOT_BRACKETS.sub("", _JSON_STRING.sub("", text)).translate(_BRACKETS)
    for _ in range(max_depth):
        if not brackets:
            return False
        brackets = brackets.replace("()", "")
    return bool(brackets)


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH, strict: bool = True) -> Any:
    """``text`` parsed as JSON, or a ValueError naming the problem: json.JSONDecodeError
    for a syntax error, UnreadableJSON for nesting deeper than ``max_depth`` and, when
    ``strict``, for what PostgreSQL cannot store (NaN and Infinity, a number no float
    holds, NUL characters, unpaired surrogates). Not ``strict``: the caller checks those
    value by value (``storage_problem``) to say which value is wrong."""
    if isinstance(text, bytes | bytearray):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnreadableJSON(f"not valid UTF-8 (byte {exc.start})") from None
    try:
        if strict:
            value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        else:
            value = json.loads(text)
    except RecursionError:
        # json's C scanner gives up near Python's recursion limit (about 1,000 levels).
        raise UnreadableJSON(f"nested deeper than {max_depth} levels") from None
    # The text tells at C speed whether the value needs walking; the walk (in Python)
    # then finds where the problem is.
    suspect = _deeper_than(text, max_depth)
    if strict and not suspect:
        suspect = bool(_SUSPECT_ESCAPE.search(text)) or not _encodable(text)
    if suspect:
        problem = value_problem(value, max_depth=max_depth) if strict else depth_problem(value, max_depth=max_depth)
        if problem:
            raise UnreadableJSON(problem)
    return value


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def depth_problem(value: Any, *, max_depth: int = MAX_DEPTH) -> str:
    """ "path: nested deeper than N levels" when ``value`` is, else ""."""
    stack: list[tuple[Any, int, tuple | None]] = [(value, 1, None)]
    while stack:
        item, depth, chain = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                where, problem = _path(chain), f"nested deeper than {max_depth} levels"
                return f"{where}: {problem}" if where else problem
            children = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend((child, depth + 1, (key, chain)) for key, child in children)
    return ""


# A browser form of the browsable API sends its CSRF token along with the fields.
NOT_FIELDS = frozenset({"csrfmiddlewaretoken"})
MAX_NAMED = 10


def unknown_fields(data: Any, accepted: Iterable[str]) -> str:
    """ "unknown field 'x': the fields are a, b and c" when ``data`` (an object) has keys
    not ``accepted``, else "": an unknown field is refused, never dropped silently."""
    if not isinstance(data, Mapping):
        return ""
    accepted = list(accepted)
    unknown = sorted(str(key) for key in data if key not in accepted and key not in NOT_FIELDS)
    if not unknown:
        return ""
    named = ", ".join(repr(printable(name, 60)) for name in unknown[:MAX_NAMED])
    more = f" and {len(unknown) - MAX_NAMED} more" if len(unknown) > MAX_NAMED else ""
    fields = ", ".join(accepted) if accepted else "none"
    return f"unknown field{'s' if len(unknown) > 1 else ''} {named}{more}: the fields are {fields}"


def finite_number(value: int | float) -> bool:
    """Whether a number is finite and a float can hold it (a huge integer cannot)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


TRUNCATED = f"[nested deeper than {MAX_DEPTH} levels: not kept]"

# What ``storable_lossless`` tells its ``note`` it changed (the OTLP mapping reports these
# in partial_success).
NUL_REMOVED = "NUL characters removed"
SURROGATES_REPLACED = "unpaired surrogates replaced by ?"
NOT_FINITE_AS_TEXT = "NaN or Infinity kept as text"
NESTING_CUT = f"values nested deeper than {MAX_DEPTH} levels replaced by a note"


def _ignore(what: str) -> None:
    pass


def storable_lossy(value: Any) -> Any:
    """``value`` made storable, for values the platform produced (an evaluator's answer,
    a job's message), never for input a client sent (that is refused): NaN and
    infinities become None (lost), NUL characters are removed from texts, unpaired
    surrogates become ?, what is nested deeper than MAX_DEPTH is replaced by a note; a
    value that is not JSON (a Decimal, say) is left as it is."""
    return _storable(value, 1, False, _ignore)


def query_problem(query: Mapping) -> str | None:
    """What no query parameter of ``query`` (a QueryDict) may hold, named, or None: a NUL
    character (no stored value holds one, and PostgreSQL refuses it as a query's
    parameter: psycopg's DataError, a 500 from any filter that passed the text on)."""
    for name, values in query.lists():
        if "\x00" in name or any("\x00" in value for value in values):
            # Named as a body's field is ("input: contains a NUL ..."), the API's way.
            return f"{name}: {NUL}"
    return None


def storable_lossless(value: Any, *, note: Callable[[str], None] = _ignore) -> Any:
    """``value`` made storable, for telemetry a client sent that is cleaned rather than
    refused (the OTLP mapping, what ingestion is handed): as ``storable_lossy``, except
    that no number is lost: NaN and infinities are kept as the texts "NaN", "Infinity"
    and "-Infinity", and a value that is not JSON becomes its text. ``note`` is told
    each kind of change made (``NUL_REMOVED``, ``SURROGATES_REPLACED``,
    ``NOT_FINITE_AS_TEXT``, ``NESTING_CUT``)."""
    return _storable(value, 1, True, note)


def storable_text(text: str, *, note: Callable[[str], None] = _ignore) -> str:
    """``text`` as PostgreSQL stores it: without NUL characters and unpaired surrogates
    (which JSON escapes such as ``\\ud800`` can produce), the same in both variants."""
    if "\x00" in text:
        text = text.replace("\x00", "")
        note(NUL_REMOVED)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "replace").decode("utf-8")
            note(SURROGATES_REPLACED)
    return text


def _storable(value: Any, depth: int, lossless: bool, note: Callable[[str], None]) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return storable_text(value, note=note)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if not lossless:
            return None
        note(NOT_FINITE_AS_TEXT)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if depth > MAX_DEPTH and (lossless or isinstance(value, dict | list | tuple)):
        note(NESTING_CUT)
        return TRUNCATED
    if isinstance(value, dict):
        return {
            storable_text(str(key), note=note): _storable(item, depth + 1, lossless, note)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_storable(item, depth + 1, lossless, note) for item in value]
    return storable_text(str(value), note=note) if lossless else value


# A JSON text this long or longer stays text on a page and in a comparison (ingestion
# parses any length).
SHOWN_JSON_CHARS = 2_000_000


def json_from_text(value: Any, *, any_json: bool = False, max_chars: int | None = None) -> Any:
    """The JSON a text holds (tool arguments and telemetry attributes often are JSON
    sent as text), parsed as it is (not cleaned: ``storable_lossless`` is the caller's
    choice); anything else, or a text that is not JSON, as it is. Only an object or an
    array is parsed unless ``any_json`` (so a plain text "42" or "true" stays text); a
    text of ``max_chars`` characters or more is left as text."""
    if not isinstance(value, str):
        return value
    stripped = value.strip()
    if not stripped or (not any_json and stripped[0] not in "[{"):
        return value
    if max_chars is not None and len(stripped) >= max_chars:
        return value
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return value
