"""Which launches of each kernel a recording keeps (`ikp record --launches`): the grammar, its validation,
and the reference of what a selection selects.

Grammar (one string; items separated by commas, commas inside (), [] or {} belong to a regular expression):

    SPEC      := ITEM ("," ITEM)*
    ITEM      := SELECTION | KEY "=" SELECTION          KEY := "default" | REGEX (re.search on the kernel name)
    SELECTION := N | A:B | A: | every=K | last | all | none   (N, A, B, K integers; launches count from 0)

A bare SELECTION is the default (at most one default, bare or ``default=``). A kernel takes the selection of
the first REGEX that matches its name, in the order given, else the default, else ``1``: one launch per
kernel, the one after its first (the first launch of a kernel pays for cold caches and lazy loading).
An item is read as a bare SELECTION when it is one as a whole (``every=100``); otherwise it splits at its
first ``=`` (a REGEX holding ``=`` spells it ``\\x3d``).

What a selection selects, out of the `seen` launches of one compiled kernel (indices 0 .. seen-1, counted
per kernel id on the device, CUDA graph replays included): ``N`` launch N; ``A:B`` launches A .. B-1; ``A:``
launches A on; ``every=K`` launches 0, K, 2K, ...; ``last`` the last launch; ``all`` every launch; ``none``
none. The canonical text (``Selection.text``) is the recording pool's own selection (ikp_cute.pool.Pool.select,
parsed by host_decode.core.wire.pool_selection), and ``selects`` decides a launch with the device's rule
(wire.pool_decide) on those window words, so the grammar and the device cannot drift apart; the recording's
summary checks what was recorded against ``selected`` (a selected launch the pool could not hold is counted
in its lost records, never dropped silently).

Invariants (tests/unit/host_decode/load/test_launches.py guards each): every form parses to the canonical
text the pool takes (``Selection.text``, accepted by wire.pool_selection), and the canonical text parses
back to the same selection; every malformed spec is a ValueError naming the bad item and what was expected;
``selected`` agrees with a launch-by-launch predicate (``selects``) for every form.
"""

from __future__ import annotations

import dataclasses
import re

from host_decode.core import wire

DEFAULT_SELECTION = "1"
FORMS = "N, A:B, A:, every=K, last, all or none"
_INT = r"(0|[1-9][0-9]*)"
_RANGE = re.compile(rf"{_INT}:{_INT}")
_FROM = re.compile(rf"{_INT}:")
_EVERY = re.compile(rf"every={_INT}")
_ONE = re.compile(_INT)
MAX_INDEX = (1 << 31) - 1  # launch counters on the device are 32-bit


@dataclasses.dataclass(frozen=True)
class Selection:
    """One selection: kind "index" (start), "range" (start, stop), "from" (start), "every" (step), "last", "all",
    "none"."""

    kind: str
    start: int = 0
    stop: int = 0
    step: int = 0

    @property
    def text(self) -> str:
        """The canonical text, the one ikp_cute.pool.Pool.select takes."""
        if self.kind == "index":
            return str(self.start)
        if self.kind == "range":
            return f"{self.start}:{self.stop}"
        if self.kind == "from":
            return f"{self.start}:"
        if self.kind == "every":
            return f"every={self.step}"
        return self.kind

    def selects(self, index: int, seen: int) -> bool:
        """Whether launch `index` (0-based) of a kernel launched `seen` times is recorded: the device's rule
        (wire.pool_decide) on the pool's window words for this selection; `last` keeps the newest launch."""
        if not 0 <= index < seen:
            return False
        if self.kind == "last":
            return index == seen - 1
        return wire.pool_decide(*wire.pool_selection(self.text), index)[0]

    def selected(self, seen: int) -> list[int]:
        """The launch indices selected out of `seen` launches, ascending (the reference semantics)."""
        seen = max(0, int(seen))
        if self.kind == "index":
            return [self.start] if self.start < seen else []
        if self.kind == "range":
            return list(range(self.start, min(self.stop, seen)))
        if self.kind == "from":
            return list(range(self.start, seen))
        if self.kind == "every":
            return list(range(0, seen, self.step))
        if self.kind == "last":
            return [seen - 1] if seen else []
        return list(range(seen)) if self.kind == "all" else []

    def describe(self) -> str:
        """In words: 'launch 1 (the 2nd)', 'launches 3 to 5', 'every 100th launch from launch 0', ..."""
        if self.kind == "index":
            return f"launch {self.start} (the {_ordinal(self.start + 1)})"
        if self.kind == "range":
            return f"launches {self.start} to {self.stop - 1}"
        if self.kind == "from":
            return f"launches {self.start} on"
        if self.kind == "every":
            return f"every {_ordinal(self.step)} launch from launch 0" if self.step > 1 else "every launch"
        return {"last": "the last launch", "all": "every launch", "none": "no launch"}[self.kind]


def _ordinal(n: int) -> str:
    tail = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{tail}"


def parse_selection(text: str) -> Selection:
    """One SELECTION (see the module docstring); ValueError naming it when malformed."""
    t = text.strip()
    if t in ("last", "all", "none"):
        return Selection(t)
    if _ONE.fullmatch(t):
        return Selection("index", start=_index(t, text))
    m = _RANGE.fullmatch(t)
    if m:
        start, stop = _index(m.group(1), text), _index(m.group(2), text)
        if stop <= start:
            raise ValueError(f"{text!r}: a range A:B needs A < B (launches A .. B-1), got {start}:{stop}")
        return Selection("range", start=start, stop=stop)
    m = _FROM.fullmatch(t)
    if m:
        return Selection("from", start=_index(m.group(1), text))
    m = _EVERY.fullmatch(t)
    if m:
        step = _index(m.group(1), text)
        if step < 1:
            raise ValueError(f"{text!r}: every=K needs K >= 1")
        return Selection("every", step=step)
    raise ValueError(f"{text!r} is not a launch selection (expected {FORMS})")


def _index(digits: str, text: str) -> int:
    value = int(digits)
    if value > MAX_INDEX:
        raise ValueError(f"{text!r}: {value} is beyond the device's launch counter (at most {MAX_INDEX})")
    return value


def is_selection(text: str) -> bool:
    try:
        parse_selection(text)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """A parsed --launches: per-kernel rules (pattern text, compiled regex, selection) in order, and the
    default selection."""

    rules: tuple = ()
    default: Selection = dataclasses.field(default_factory=lambda: parse_selection(DEFAULT_SELECTION))
    text: str = DEFAULT_SELECTION

    def for_kernel(self, name: str) -> Selection:
        """The selection of the kernel named `name`: the first rule whose regex matches, else the default."""
        for _, regex, selection in self.rules:
            if regex.search(name):
                return selection
        return self.default

    def rule_for(self, name: str) -> str:
        """Which item chose the kernel's selection: the rule's pattern, or "default"."""
        for pattern, regex, _ in self.rules:
            if regex.search(name):
                return pattern
        return "default"


def split_items(text: str) -> list[str]:
    """Items of a spec: commas split, but not inside (), [] or {} nor after a backslash."""
    items, depth, current, escaped = [], 0, [], False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            current.append(ch)
            escaped = True
        elif ch in "([{":
            depth += 1
            current.append(ch)
        elif ch in ")]}":
            depth = max(0, depth - 1)
            current.append(ch)
        elif ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return items


def parse_launches(text: str) -> LaunchPlan:
    """A whole --launches spec (see the module docstring); ValueError naming the bad item otherwise."""
    if text is None or not str(text).strip():
        raise ValueError("--launches is empty (expected e.g. 1, 3:6, every=100, 'flash.*=2,default=1')")
    rules, default, patterns = [], None, set()
    for raw in split_items(str(text)):
        item = raw.strip()
        if not item:
            raise ValueError(f"{text!r}: an empty item (two commas, or a comma at an end)")
        if is_selection(item):
            key, value = "default", item
        elif "=" in item:
            key, value = (part.strip() for part in item.split("=", 1))
            if key == "every":
                raise ValueError(f"{text!r}: item {item!r}: every=K needs an integer K >= 1")
            if not key:
                raise ValueError(f"{text!r}: item {item!r} has no kernel pattern before '='")
        else:
            raise ValueError(f"{text!r}: item {item!r} is not a launch selection (expected {FORMS}) "
                             "nor PATTERN=SELECTION")
        try:
            selection = parse_selection(value)
        except ValueError as e:
            raise ValueError(f"{text!r}: in item {item!r}, {e}") from None
        if key == "default":
            if default is not None:
                raise ValueError(f"{text!r}: two defaults ({default.text!r} and {item!r}); give one")
            default = selection
            continue
        if key in patterns:
            raise ValueError(f"{text!r}: pattern {key!r} is given twice")
        try:
            regex = re.compile(key)
        except re.error as e:
            raise ValueError(f"{text!r}: in item {item!r}, {key!r} is not a regular expression ({e})") from None
        patterns.add(key)
        rules.append((key, regex, selection))
    return LaunchPlan(tuple(rules), default or parse_selection(DEFAULT_SELECTION), str(text).strip())
