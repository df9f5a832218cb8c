"""Whether a regular expression people wrote can backtrack catastrophically, decided
by reading the pattern, never by timing it (a timed probe answers differently on a
fast and a slow machine).

A backtracking engine takes exponential time when a repeated part of a pattern can
match the same text in more than one way, so that every extra character doubles the
ways to try. Two shapes cause it, and both are refused:

- nested repetition whose iterations can split the same text differently: ``(a+)+``,
  ``(\\d+\\s?)*``, ``(x+x+)+``: inside a repeated group, a variable repetition whose
  characters can also start what follows it (the rest of the group, or the group's
  next iteration);
- alternatives that can start alike inside a repetition: ``(a|a)+``, ``(\\w|\\d)+``.

The check is conservative (a pattern that is safe but has one of these shapes, such as
``(cat|car)+``, is refused with a message saying what to rewrite) and only looks at
repetition: what is left (``\\d+\\d+``, polynomial at worst) is bounded at run time by
the time budget of each match. Atomic groups ``(?>...)`` and possessive quantifiers
(``a++``) never backtrack into their content and end the search there.

Characters are compared on a small alphabet of representatives (ASCII and a few
non-ASCII letters, digits and spaces), each part of the pattern tested on them with
the `regex` engine itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import regex

ALPHABET = tuple(chr(code) for code in range(128)) + ("é", "ß", "Ж", "中", "٣", "\u00a0", "\u2028", "😀")
ANY = frozenset(ALPHABET)
NOTHING: frozenset = frozenset()
_FLAG_LETTERS = set("aiLmsuxfbeprwV01-")
_ZERO_WIDTH_ESCAPES = set("bBAZzGKmM")


@dataclass(eq=False)
class _Atom:
    """One character (a literal, a class, an escape, ``.``), or a zero-width assertion
    or back-reference (``first`` is what it may start with)."""

    first: frozenset
    nullable: bool = False


@dataclass(eq=False)
class _Group:
    branches: list[list] = field(default_factory=list)
    atomic: bool = False  # (?>...): never backtracked into
    lookaround: bool = False  # zero width


@dataclass(eq=False)
class _Repeat:
    node: object
    low: int
    high: int | None  # None: unbounded
    possessive: bool = False


class _Parser:
    def __init__(self, pattern: str):
        self.text = pattern
        self.position = 0
        leading = regex.match(r"(?:\(\?([a-zA-Z]+)\))*", pattern)
        self.flags = "".join(regex.findall(r"\(\?([a-zA-Z]+)\)", leading.group(0))) if leading else ""
        self.verbose = "x" in self.flags
        self.prefix = "(?" + "".join(sorted(set(self.flags) & set("ismu"))) + ")" if self.flags else ""

    def peek(self, offset: int = 0) -> str:
        index = self.position + offset
        return self.text[index] if index < len(self.text) else ""

    def chars_of(self, source: str) -> frozenset:
        return _chars_of(self.prefix, source)

    def parse(self) -> _Group:
        group = self.alternation()
        return group

    def alternation(self) -> _Group:
        group = _Group(branches=[self.sequence()])
        while self.peek() == "|":
            self.position += 1
            group.branches.append(self.sequence())
        return group

    def sequence(self) -> list:
        items: list = []
        while self.peek() and self.peek() not in "|)":
            if self.verbose and self.peek().isspace():
                self.position += 1
                continue
            if self.verbose and self.peek() == "#":
                while self.peek() and self.peek() != "\n":
                    self.position += 1
                continue
            node = self.atom()
            if node is not None:
                items.append(self.quantified(node))
        return items

    def quantified(self, node):
        while True:
            low, high = None, None
            character = self.peek()
            if character == "*":
                low, high, self.position = 0, None, self.position + 1
            elif character == "+":
                low, high, self.position = 1, None, self.position + 1
            elif character == "?":
                low, high, self.position = 0, 1, self.position + 1
            elif character == "{":
                bounds = regex.match(r"\{(\d*)(,?)(\d*)\}", self.text[self.position :])
                if bounds is None or (not bounds.group(1) and not bounds.group(3)):
                    return node  # a literal "{"
                self.position += len(bounds.group(0))
                low = int(bounds.group(1) or 0)
                high = low if not bounds.group(2) else (int(bounds.group(3)) if bounds.group(3) else None)
            else:
                return node
            possessive = False
            if self.peek() == "?":
                self.position += 1
            elif self.peek() == "+":
                self.position += 1
                possessive = True
            node = _Repeat(node=node, low=low, high=high, possessive=possessive)

    def atom(self):
        character = self.peek()
        if character == "(":
            return self.group()
        if character == "[":
            start = self.position
            self.skip_class()
            return _Atom(first=self.chars_of(self.text[start : self.position]))
        if character == "\\":
            return self.escape()
        self.position += 1
        if character in "^$":
            return _Atom(first=NOTHING, nullable=True)
        return _Atom(first=self.chars_of(regex.escape(character) if character != "." else "."))

    def skip_class(self) -> None:
        self.position += 1
        if self.peek() == "^":
            self.position += 1
        if self.peek() == "]":
            self.position += 1
        while self.peek() and self.peek() != "]":
            if self.peek() == "\\":
                self.position += 2
            elif self.peek() == "[" and self.peek(1) == ":":
                end = self.text.find(":]", self.position + 2)
                self.position = end + 2 if end != -1 else self.position + 1
            else:
                self.position += 1
        self.position += 1

    def escape(self):
        start = self.position
        letter = self.peek(1)
        self.position += 2
        if not letter:  # a trailing backslash: the engine refuses the pattern anyway
            return _Atom(first=ANY)
        if letter in _ZERO_WIDTH_ESCAPES:
            return _Atom(first=NOTHING, nullable=True)
        if letter in "pPNx" and self.peek() == "{":  # \p{L}, \N{name}, \x{263a}
            end = self.text.find("}", self.position)
            self.position = end + 1 if end != -1 else len(self.text)
        elif letter == "x":
            self.position += 2
        elif letter == "u":
            self.position += 4
        elif letter == "U":
            self.position += 8
        elif letter == "0":
            while self.peek() in "01234567" and self.peek() and self.position - start < 4:
                self.position += 1
        elif letter.isdigit() or (letter in "gk" and self.peek() and self.peek() in "<{'"):
            # A back-reference: it may match anything, or nothing.
            if letter in "gk":
                closing = {"<": ">", "{": "}", "'": "'"}[self.peek()]
                end = self.text.find(closing, self.position + 1)
                self.position = end + 1 if end != -1 else len(self.text)
            while self.peek().isdigit():
                self.position += 1
            return _Atom(first=ANY, nullable=True)
        return _Atom(first=self.chars_of(self.text[start : self.position]))

    def group(self):
        self.position += 1
        atomic = lookaround = False
        if self.peek() == "?":
            rest = self.text[self.position + 1 :]
            if rest.startswith("#"):
                end = self.text.find(")", self.position)
                self.position = end + 1 if end != -1 else len(self.text)
                return None
            if rest.startswith((":", "|")):
                self.position += 2
            elif rest.startswith(">"):
                self.position += 2
                atomic = True
            elif rest.startswith(("=", "!")):
                self.position += 2
                lookaround = True
            elif rest.startswith(("<=", "<!")):
                self.position += 3
                lookaround = True
            elif rest.startswith(("P<", "<", "'")):
                closing = "'" if rest.startswith("'") else ">"
                end = self.text.find(closing, self.position + 3)
                self.position = end + 1 if end != -1 else len(self.text)
            elif rest.startswith("("):  # a condition: (?(1)yes|no)
                end = self.text.find(")", self.position + 2)
                self.position = end + 1 if end != -1 else len(self.text)
            else:
                flags = 0
                while rest[flags : flags + 1] and rest[flags] in _FLAG_LETTERS:
                    flags += 1
                if rest[flags : flags + 1] == ":":
                    self.position += flags + 2
                else:
                    # Flags alone, a recursion ((?R), (?1), (?&name)) or a named
                    # back-reference ((?P=name)): no content of its own.
                    end = self.text.find(")", self.position)
                    self.position = end + 1 if end != -1 else len(self.text)
                    if flags and rest[flags : flags + 1] == ")":
                        return None
                    return _Atom(first=ANY, nullable=True)
        group = self.alternation()
        group.atomic, group.lookaround = atomic, lookaround
        if self.peek() == ")":
            self.position += 1
        return group


@lru_cache(maxsize=1024)
def _chars_of(prefix: str, source: str) -> frozenset:
    """The characters of the alphabet that ``source`` (one character's worth of
    pattern) matches."""
    try:
        compiled = regex.compile(prefix + "(?:" + source + ")", regex.V0)
    except regex.error:
        return ANY
    return frozenset(character for character in ALPHABET if compiled.fullmatch(character))


def _memo(function):
    """Each property computed once per node (a pattern of 500 characters may nest 160
    groups; recomputing subtrees at every level would take seconds)."""
    name = f"_{function.__name__}_memo"

    def memoised(node):
        value = node.__dict__.get(name)
        if value is None:
            value = function(node)
            node.__dict__[name] = value
        return value

    return memoised


@_memo
def _nullable(node) -> bool:
    if isinstance(node, _Atom):
        return node.nullable
    if isinstance(node, _Repeat):
        return node.low == 0 or _nullable(node.node)
    if node.lookaround:
        return True
    return any(all(_nullable(item) for item in branch) for branch in node.branches)


@_memo
def _first(node) -> frozenset:
    """The characters a match of ``node`` may start with."""
    if isinstance(node, _Atom):
        return node.first
    if isinstance(node, _Repeat):
        return _first(node.node)
    if node.lookaround:
        return NOTHING
    return frozenset().union(*(_sequence_first(branch, NOTHING) for branch in node.branches))


def _sequence_first(items: list, then: frozenset) -> frozenset:
    """What ``items`` followed by something starting with ``then`` may start with."""
    first: frozenset = frozenset()
    for item in items:
        first |= _first(item)
        if not _nullable(item):
            return first
    return first | then


@_memo
def _chars(node) -> frozenset:
    """Every character a match of ``node`` may contain."""
    if isinstance(node, _Atom):
        return node.first
    if isinstance(node, _Repeat):
        return _chars(node.node)
    if node.lookaround:
        return NOTHING
    return frozenset().union(*(_chars(item) for branch in node.branches for item in branch))


def _children(node) -> list:
    if isinstance(node, _Repeat):
        return [node.node]
    if isinstance(node, _Group):
        return [item for branch in node.branches for item in branch]
    return []


def _ambiguity(node, follow: frozenset) -> str | None:
    """Why ``node``, followed by text starting with ``follow``, can match one text in two
    ways inside a repetition (None: it cannot, as far as this check sees)."""
    if isinstance(node, _Atom):
        return None
    if isinstance(node, _Repeat):
        if node.possessive:
            return None
        if node.low != node.high and _chars(node.node) & follow:
            return "nested repetition"
        return _ambiguity(node.node, follow | _first(node.node))
    if node.atomic or node.lookaround:
        return None
    starts = [_sequence_first(branch, follow) for branch in node.branches]
    for index, start in enumerate(starts):
        if any(start & other for other in starts[index + 1 :]):
            return "alternatives that can match the same text"
    for branch in node.branches:
        for position, item in enumerate(branch):
            reason = _ambiguity(item, _sequence_first(branch[position + 1 :], follow))
            if reason:
                return reason
    return None


def _repeats(node):
    """Every repetition in the pattern, outermost first."""
    if isinstance(node, _Repeat):
        yield node
    for child in _children(node):
        yield from _repeats(child)


def catastrophic_backtracking(pattern: str) -> str | None:
    """What makes ``pattern`` backtrack catastrophically ("nested repetition",
    "alternatives that can match the same text"), or None when it has neither shape.
    Needs no compiled pattern: it runs before the `regex` engine compiles one, which
    itself takes exponential time on nested repetition (20 levels: seconds)."""
    try:
        tree = _Parser(pattern).parse()
        for repeat in _repeats(tree):
            if repeat.possessive or (repeat.high is not None and repeat.high <= 1):
                continue
            # Inside the repetition, what follows the body's end is its next iteration.
            reason = _ambiguity(repeat.node, _first(repeat.node))
            if reason:
                return reason
    except RecursionError:
        return "groups nested too deeply"
    return None
