"""The console every command prints with, and the one table model (Table, Column) with its renderer: a table
is measured against the terminal it is printed on and laid out to fit it, never cropped.

Invariants, and the tests that guard them (tests/unit/host_decode/reports/test_tables_fit_terminal.py,
::test_tables_render):
- no printed line is wider than the console; a number is never wrapped, folded or cut: a numeric column is
  as wide as its widest cell;
- a table too wide for the terminal first wraps its headers at spaces and its text columns (names wrap at
  spaces, a longer word folds, a cell of items wraps between whole items), then is split into parts of
  columns that each fit, its key columns (what names a row) repeated in every part; where not even one
  column fits beside the keys, each row is printed as a block of `header value` items;
- a text column may limit its lines (`max_lines`): a longer cell is cut, marked with "…", and the table's
  notes say how to see it whole;
- a console on a file is 200 columns wide; on a pipe, $COLUMNS or 160; colour codes only on a terminal
  (and never with NO_COLOR set).
Importing this module costs nothing heavy (no rich): `ikp decode` prints its tables in the time of its
decode budget (benchmarks/bigcap_bench.py).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import sys
import unicodedata
from typing import Any, Callable

GAP = 2  # spaces between columns
FILE_WIDTH = 200  # a console on a file
PIPE_WIDTH = 160  # stdout is a pipe and $COLUMNS unset
TEXT_MIN = 12  # a text column is not wrapped narrower than this (or its longest header word)
CUT = "…"
STYLES = {"bold": "1", "dim": "2", "italic": "3", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def cell_len(text: str) -> int:
    """Terminal cells of `text` (wide East Asian characters take two)."""
    if text.isascii():
        return len(text)
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


@dataclasses.dataclass(frozen=True)
class Column:
    """A column: its header, how a row dict gives its value (`key`, or `value(row)`), how the value is shown
    (`fmt`); `text`: a name (left-justified, wraps), else a number (right-justified, never wraps); `sep`:
    a text cell of items wraps only between items (", "); `max_lines`: a longer text cell is cut ("…")."""

    header: str
    key: str | None = None
    fmt: Callable[[Any], str] = str
    value: Callable[[dict], Any] | None = None
    text: bool = False
    sep: str | None = None
    max_lines: int | None = None

    def cell(self, row: dict) -> str:
        return self.fmt(self.value(row) if self.value is not None else row.get(self.key))


@dataclasses.dataclass
class Table:
    """Rows (dicts, e.g. the rows of a command's JSON) shown as `columns`. `name`: what `--table NAME`
    picks for `--format csv`; `keys`: leading columns that name a row (default: the leading text columns);
    `styles`: one style per row or None; `notes`: lines printed under the table; `terms`: the glossary's terms
    the table uses (reports/glossary.py), named in its footer with where they are explained."""

    title: str
    columns: list[Column]
    rows: list[dict]
    name: str = ""
    keys: int | None = None
    styles: list | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    terms: tuple | None = ()  # None: no terms footer (the glossary's own table)

    def key_count(self) -> int:
        if self.keys is not None:
            return self.keys
        n = 0
        while n < len(self.columns) - 1 and self.columns[n].text:
            n += 1
        return max(n, 1)

    def csv(self) -> str:
        """The rows as CSV: a header of every key the rows have (in order of first appearance), lists and
        objects as JSON text; "" when there are no rows."""
        import json

        if not self.rows:
            return ""
        fields = list(dict.fromkeys(k for r in self.rows for k in r))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", restval="")
        writer.writeheader()
        for r in self.rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()})
        return buf.getvalue()


# ---------------------------------------------------------------------------------------- wrapping


def wrap_text(text: str, width: int, sep: str | None = None) -> list[str]:
    """`text` in lines of at most `width` cells: broken between items of `sep` (or at spaces), an item or
    word longer than a line folded at `width`."""
    if cell_len(text) <= width:
        return [text]
    if sep:
        items = text.split(sep)
        words = [item + (sep.rstrip() if i < len(items) - 1 else "") for i, item in enumerate(items)]
        joiner = " " if sep.endswith(" ") else ""
    else:
        words, joiner = text.split(" "), " "
    lines, line = [], ""
    for word in words:
        candidate = word if not line else line + joiner + word
        if cell_len(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        while cell_len(word) > width:
            lines.append(word[:width])
            word = word[width:]
        line = word
    if line or not lines:
        lines.append(line)
    return lines


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * max(width - cell_len(text), 0)
    return fill + text if right else text + fill


# ---------------------------------------------------------------------------------------- layout


@dataclasses.dataclass
class _Part:
    columns: list  # indices into the table's columns
    widths: list


def _natural(table: Table, cells: list) -> tuple[list, list]:
    """(natural width, least width) of each column: numbers never narrower than their widest cell."""
    natural, least = [], []
    for j, col in enumerate(table.columns):
        widest = max([cell_len(r[j]) for r in cells] or [0])
        header_word = max(cell_len(w) for w in col.header.split(" ")) if col.header else 0
        natural.append(max(widest, cell_len(col.header)))
        if col.text:
            longest_item = max([cell_len(w) for r in cells for w in (r[j].split(col.sep) if col.sep else [])] or [0])
            least.append(max(header_word, min(widest, max(TEXT_MIN, longest_item if col.sep else 0))))
        else:
            least.append(max(widest, header_word))
    return natural, least


def _fit(columns: list, natural: list, least: list, width: int, text: list) -> list | None:
    """Widths of `columns` within `width` (GAP between), text columns shrunk as little as needed; None when
    even the least widths do not fit."""
    gaps = GAP * (len(columns) - 1)
    if sum(natural[j] for j in columns) + gaps <= width:
        return [natural[j] for j in columns]
    if sum(least[j] for j in columns) + gaps > width:
        return None
    # numbers keep their whole headers when shrinking the text columns is enough, else their headers wrap
    whole_headers = sum(natural[j] if not text[j] else least[j] for j in columns) + gaps <= width
    widths = [natural[j] if text[j] or whole_headers else least[j] for j in columns]
    excess = sum(widths) + gaps - width
    while excess > 0:  # take a cell from the widest text column above its least, one at a time
        k = max((k for k, j in enumerate(columns) if text[j] and widths[k] > least[j]), key=lambda k: widths[k])
        widths[k] -= 1
        excess -= 1
    return widths


def layout(table: Table, cells: list, width: int) -> list[_Part] | None:
    """The parts a table is printed in (one when it fits); None: stack each row instead."""
    n = len(table.columns)
    natural, least = _natural(table, cells)
    text = [c.text for c in table.columns]
    whole = _fit(list(range(n)), natural, least, width, text)
    if whole is not None:
        return [_Part(list(range(n)), whole)]
    keys = list(range(min(table.key_count(), n - 1)))
    key_room = sum(least[j] for j in keys) + GAP * len(keys)
    rest = [j for j in range(len(keys), n)]
    parts, current = [], []
    for j in rest:
        trial = current + [j]
        if _fit(keys + trial, natural, least, width, text) is None:
            if not current:
                return None  # one column beside the keys is already too wide
            parts.append(current)
            current = [j]
        else:
            current = trial
    if current:
        parts.append(current)
    if key_room > width // 2 and len(parts) > len(rest) // 2:
        return None  # the keys would fill every part: rows as blocks read better
    return [_Part(keys + p, _fit(keys + p, natural, least, width, text)) for p in parts]


def _row_lines(table: Table, part: _Part, cells: list[str]) -> tuple[list[str], bool]:
    """The lines of one row in a part, and whether a cell was cut."""
    wrapped, cut = [], False
    for j, w in zip(part.columns, part.widths):
        col = table.columns[j]
        lines = wrap_text(cells[j], w, col.sep) if col.text else [cells[j]]
        if col.max_lines and len(lines) > col.max_lines:
            lines = lines[: col.max_lines]
            lines[-1] = (lines[-1][: w - 1] if cell_len(lines[-1]) >= w else lines[-1]) + CUT
            cut = True
        wrapped.append(lines)
    height = max(len(x) for x in wrapped)
    out = []
    for i in range(height):
        pieces = [_pad(lines[i] if i < len(lines) else "", w, not table.columns[j].text)
                  for lines, j, w in zip(wrapped, part.columns, part.widths)]
        out.append((" " * GAP).join(pieces).rstrip())
    return out, cut


def _header_lines(table: Table, part: _Part) -> list[str]:
    wrapped = [wrap_text(table.columns[j].header, w) for j, w in zip(part.columns, part.widths)]
    height = max(len(x) for x in wrapped)
    lines = []
    for i in range(height):  # headers sit on their last line, as the cells below them
        pieces = []
        for lines_j, j, w in zip(wrapped, part.columns, part.widths):
            k = i - (height - len(lines_j))
            pieces.append(_pad(lines_j[k] if k >= 0 else "", w, not table.columns[j].text))
        lines.append((" " * GAP).join(pieces).rstrip())
    return lines


def _stacked(table: Table, cells: list, width: int, styles: list) -> tuple[list, bool]:
    """Each row as a block: its keys on one line, then `header value` items packed into lines."""
    out, keys = [], table.key_count()
    for r, style in zip(cells, styles):
        head = " · ".join(r[:keys])
        out += [(line, style) for line in wrap_text(head, width)]
        items = [f"{c.header} {r[j]}" for j, c in enumerate(table.columns) if j >= keys]
        for line in wrap_text("   ".join(items), width - 2, sep="   "):
            out.append(("  " + line, style))
    return out, False


def render(table: Table, width: int) -> list[tuple[str, str | None]]:
    """(line, style) pairs of `table` laid out within `width` cells."""
    cells = [[c.cell(r) for c in table.columns] for r in table.rows]
    styles = table.styles or [None] * len(cells)
    lines: list = [(line, "italic") for line in wrap_text(table.title, width)] if table.title else []
    if not cells:
        return lines + [("(none)", None)]
    parts = layout(table, cells, width)
    cut = False
    if parts is None:
        body, cut = _stacked(table, cells, width, styles)
        lines += body
    for p, part in enumerate(parts or []):
        if p:
            lines.append(("", None))
            lines += [(line, "italic") for line in wrap_text(f"{table.title} (continued, {p + 1}/{len(parts)})",
                                                             width)]
        head = _header_lines(table, part)
        rows = []
        for r in cells:
            row, was_cut = _row_lines(table, part, r)
            rows.append(row)
            cut |= was_cut
        lines += [(line, "bold") for line in head]
        lines.append(("─" * (sum(part.widths) + GAP * (len(part.widths) - 1)), None))
        for row, style in zip(rows, styles):
            lines += [(line, style) for line in row]
    notes = list(table.notes)
    if table.terms is not None:
        notes.append(f"terms: {', '.join(table.terms)} (`ikp glossary` explains them; docs/glossary.md)"
                     if table.terms else "terms: `ikp glossary` (docs/glossary.md)")
    if cut:
        notes.append(f"{CUT} marks a name cut short: --format csv (or json) shows it whole")
    for note in notes:
        lines += [(line, "dim") for line in wrap_text(note, width)]
    return lines


# ---------------------------------------------------------------------------------------- console


class Console:
    """What commands print with: `print(text)` wraps prose to the width at spaces, `print(table)` renders a
    Table to fit; `style` ("red", "bold yellow", ...) colours a line on a terminal only."""

    def __init__(self, file=None, width: int = PIPE_WIDTH, color: bool = False):
        self.file, self.width, self.color = file, int(width), color

    def print(self, obj: Any = "", style: str | None = None) -> None:
        out = self.file if self.file is not None else sys.stdout
        if isinstance(obj, Table):
            lines = render(obj, self.width)
        else:
            lines = [(line, style) for para in str(obj).split("\n") for line in wrap_text(para, self.width)]
        out.write("".join(self._styled(line, s) + "\n" for line, s in lines))

    def _styled(self, line: str, style: str | None) -> str:
        if not (self.color and style and line):
            return line
        codes = ";".join(STYLES[s] for s in style.split() if s in STYLES)
        return f"\x1b[{codes}m{line}\x1b[0m" if codes else line


def make_console(file=None, width: int | None = None) -> Console:
    """The console of a command: on a file, FILE_WIDTH wide with no colour; on a terminal, its width ($COLUMNS
    when set) with colour unless NO_COLOR is set; on a pipe, $COLUMNS or PIPE_WIDTH."""
    if file is not None:
        return Console(file=file, width=width or FILE_WIDTH)
    columns = os.environ.get("COLUMNS", "")
    tty = sys.stdout.isatty()
    if width is None:
        if columns.isdigit() and int(columns) > 0:
            width = int(columns)
        elif tty:
            import shutil

            width = shutil.get_terminal_size((PIPE_WIDTH, 24)).columns
        else:
            width = PIPE_WIDTH
    return Console(width=max(width, 20), color=tty and not os.environ.get("NO_COLOR"))


def print_tables(items: list, console: Console | None = None) -> None:
    """Print a command's output: Tables and lines of prose (a str, or a (str, style) pair), in order."""
    console = console or make_console()
    for i, item in enumerate(items):
        if isinstance(item, Table) and i:
            console.print("")  # a blank line above each table but the first thing printed
        if isinstance(item, tuple):
            console.print(item[0], style=item[1])
        else:
            console.print(item)


def pick_table(items: list, name: str | None) -> Table:
    """The Table named `name` among a command's output (the first table when None); ValueError naming the
    tables there are."""
    tables = [t for t in items if isinstance(t, Table)]
    if not tables:
        raise ValueError("this command printed no table")
    if name is None:
        return tables[0]
    for t in tables:
        if t.name == name:
            return t
    raise ValueError(f"--table {name}: no such table here (tables: {', '.join(t.name for t in tables)})")
