"""The console every command prints with, and the one table helper (rich), readable at 80 columns.

Invariants, and the tests that guard them: on a console narrower than NARROW_COLUMNS a table leaves out
its secondary columns, name columns fold instead of being cut, numbers never wrap, and every command's
tables fit 80 columns (tests/unit/host_decode/cli/test_cli_grammar.py); a console on a file is 200 columns wide with no
colour codes.
"""

from __future__ import annotations

NARROW_COLUMNS = 100  # below this console width tables drop their secondary columns (80-column terminals)


def is_narrow(con) -> bool:
    return con.width < NARROW_COLUMNS


def table(con, title: str, headers: list, rows: list, *, secondary: tuple = (), text: tuple = ()):
    """A rich table that stays readable at 80 columns: on a narrow console (is_narrow) the `secondary`
    columns are left out; `text` columns (names) keep at least 10 characters and fold instead of being
    cut to a few letters; numeric columns never wrap. A row is a list of cells or {"cells", "style"}."""
    from rich.table import Table

    narrow = is_narrow(con)
    keep = [i for i, h in enumerate(headers) if not (narrow and h in secondary)]
    t = Table(title=title, title_justify="left", pad_edge=not narrow, collapse_padding=narrow)
    for i in keep:
        if headers[i] in text:
            t.add_column(headers[i], justify="left", min_width=10, overflow="fold")
        else:
            t.add_column(headers[i], justify="right", no_wrap=True)
    for r in rows:
        style = None
        if isinstance(r, dict):
            style, r = r.get("style"), r["cells"]
        t.add_row(*[r[i] for i in keep], style=style)
    return t


def make_console(file=None):
    """The rich console every command prints with: the terminal's width on a terminal (or $COLUMNS), 160
    columns when piped or written to a file (rich's 80 would wrap every table), no colour codes in files."""
    import sys

    from rich.console import Console

    if file is not None:
        return Console(file=file, width=200, color_system=None, force_terminal=False, highlight=False)
    import os

    # $COLUMNS wins when set (COLUMNS=80 ikp ... | less gets the narrow layout); a pipe otherwise gets 160
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 160
    return Console(highlight=False, width=width)
