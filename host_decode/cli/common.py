"""What every `ikp` command shares: the flags of one grammar, safe outputs, progress, the console, one
JSON-safe converter and the "next step" line. Commands import from here, never from each other.

Grammar (guarded by tests/unit/host_decode/cli/test_cli_grammar.py):
- `-o/--output FILE` is the command's main output file, written through `outputs()` (never over an
  input, atomic, replaced only with `-f/--force`; host_decode.core.files).
- `--format table|json|csv` on every command that prints a table (`add_format`, `print_result`): the
  tables sized to the terminal, everything as JSON, or one table's rows as CSV (`--table NAME`); no flag
  is both a switch and a path.
- `--progress/--no-progress`: bars on slow steps; default on only when stderr is a terminal.
- `-q/--quiet` on every command (added by cli.build_parser): no "next:" line.
- `-v/--verbose` on every command (added by cli.build_parser): internal detail and library warnings on
  stderr; without it nothing but the command's own lines (tests/unit/host_decode/cli/test_quiet_terminal.py).
- `--names FILE` (`add_names`) on every command that decodes captures; it names every capture it reads.
- Numeric flags are checked by argparse through `number(...)`: a value out of range is a usage error
  naming the flag (exit 2), never a silent wrong result; a count that sizes an allocation (`--bins`) has an
  upper bound too (MAX_BINS), so a typo is an error, not an attempt at terabytes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Iterable

from host_decode.core.files import OutputFiles


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--force", action="store_true", help="replace existing output files")


def add_quiet(p: argparse.ArgumentParser) -> None:
    """-q/--quiet on every command (cli.build_parser adds it): no "next:" line; decode also drops its summary."""
    p.add_argument("-q", "--quiet", action="store_true", help="no 'next:' hint on stderr (decode: no summary either)")


def add_verbose(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """-v/--verbose on every command (cli.build_parser adds it): internal detail (writer timings, library
    warnings) on stderr; without it a terminal shows only the command's own output. A command module's
    VERBOSE_HELP says what else it adds."""
    p.add_argument("-v", "--verbose", action="store_true",
                   help=help or "internal detail on stderr: timings, library warnings")


SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def byte_size(text: str) -> int:
    """argparse type of a size: 4G, 512M, 1.5g, 100k or a plain number of bytes (a K/M/G is 1024-based)."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in SIZE_UNITS and t[-1:] else ""
    try:
        value = float(t[: len(t) - len(unit)]) * SIZE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 4G, 512M or 100000, got {text!r}") from None
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return int(value)


def add_read_limits(p: argparse.ArgumentParser) -> None:
    """--max-decompressed SIZE / --read-timeout SECONDS on every command (cli.build_parser adds them): the
    bounds of the one reader of compressed inputs (core.compressed)."""
    from host_decode.core.compressed import ReadLimits, size_text

    limits = ReadLimits()
    p.add_argument("--max-decompressed", type=byte_size, metavar="SIZE",
                   help=f"a gzip input may decompress to this much (default {size_text(limits.max_bytes)}, and no "
                        "more than 200x its compressed size: a gzip bomb is refused at once)")
    p.add_argument("--read-timeout", type=number(float, above=0), metavar="SECONDS",
                   help=f"reading one compressed input may take this long (default {limits.max_seconds:g} s)")


def add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bars on slow steps (default: when stderr is a terminal)",
    )


FORMATS = ("table", "json", "csv")


def add_format(p: argparse.ArgumentParser, tables: tuple = ()) -> None:
    """--format table|json|csv; `tables`: the names of the command's tables, the first the default of
    --table NAME (which one --format csv prints)."""
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="what to print: table (sized to the terminal), json (everything), csv (one table's rows)")
    if len(tables) > 1:
        p.add_argument("--table", choices=tables, default=tables[0],
                       help=f"the table --format csv prints (default {tables[0]})")


def print_result(args, items: list, data, file=None) -> None:
    """A command's result in --format: `items` (reports.tables.console: Tables and prose) as tables, their
    chosen table as CSV, or `data` as JSON; on stdout, or `file` (an open text file)."""
    from host_decode.reports.tables.console import make_console, pick_table, print_tables

    if args.format == "json":
        from host_decode.core.jsonable import dumps

        print(dumps(data), file=file or sys.stdout)
    elif args.format == "csv":
        (file or sys.stdout).write(pick_table(items, getattr(args, "table", None)).csv())
    else:
        print_tables(items, make_console(file=file))


def add_names(p: argparse.ArgumentParser, of: str = "every capture") -> None:
    """--names FILE: event and group names for ikp captures, over their sidecars' (load.inputs.read_names
    reads it; load.inputs.load_launches applies it; a foreign trace refuses it)."""
    p.add_argument(
        "--names",
        metavar="FILE",
        help=f"JSON names file {{'events': {{id: name}}, 'groups': {{id: name}}}} for {of} (overrides the sidecar's)",
    )


MAX_BINS = 100_000  # histogram bins a --bins flag may ask for


def number(kind: type = int, *, at_least: float | None = None, above: float | None = None,
           below: float | None = None, at_most: float | None = None):
    """An argparse `type=` for a flag taking an int or float within bounds (NaN is within none): argparse
    prints `argument --bins: must be >= 1, got 0` and exits 2."""
    what = "an integer" if kind is int else "a number"
    bounds = [(op, limit) for op, limit in ((">=", at_least), (">", above), ("<", below), ("<=", at_most))
              if limit is not None]
    rule = " and ".join(f"{op} {limit}" for op, limit in bounds)
    holds = {">=": lambda v, x: v >= x, ">": lambda v, x: v > x, "<": lambda v, x: v < x, "<=": lambda v, x: v <= x}

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not all(holds[op](value, limit) for op, limit in bounds):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    return parse


def outputs(args, *inputs: Any) -> OutputFiles:
    """The OutputFiles of a command: `inputs` are every path it reads (None entries and lists allowed)."""
    flat: list = []
    for x in inputs:
        if isinstance(x, (list, tuple)):
            flat.extend(x)
        else:
            flat.append(x)
    return OutputFiles(flat, force=bool(getattr(args, "force", False)))


def show_progress(args=None) -> bool:
    value = getattr(args, "progress", None) if args is not None else None
    return sys.stderr.isatty() if value is None else bool(value)


def progress(items: Iterable, desc: str, args=None, total: int | None = None):
    """tqdm over `items` when bars are on (see show_progress), else `items` unchanged."""
    if not show_progress(args):
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, total=total, leave=False, file=sys.stderr)


class Step:
    """A spinner-like line on stderr for one slow step without a natural count (off when not a terminal)."""

    def __init__(self, desc: str, args=None):
        self.desc, self.on = desc, show_progress(args)

    def __enter__(self):
        if self.on:
            print(f"{self.desc} ...", end="\r", file=sys.stderr, flush=True)
        return self

    def __exit__(self, *exc):
        if self.on:
            print(" " * (len(self.desc) + 4), end="\r", file=sys.stderr, flush=True)
        return False


def console(file=None):
    """The console every command prints with (reports.tables.console.make_console): the terminal's width
    on a terminal ($COLUMNS when set), 160 columns when piped, 200 in a file; colour on terminals only."""
    from host_decode.reports.tables.console import make_console

    return make_console(file=file)


def free_name(source, suffix: str) -> str:
    """An output name for a hint: `source`'s stem + `suffix` in the current folder (capture.npy -> capture.html),
    or stem-2, stem-3... when that file exists, so that the command runs as printed."""
    stem = Path(str(source).rstrip("/\\")).name
    for known in (".gz", ".npy", ".json", ".pftrace", ".csv", ".cubin"):
        stem = stem.removesuffix(known)
    stem = stem or "out"
    for n in range(1, 1000):
        name = f"{stem}{'' if n == 1 else f'-{n}'}{suffix}"
        if not Path(name).exists():
            return name
    return f"{stem}-{os.getpid()}{suffix}"


def next_step(text: str, args=None) -> None:
    """One line after a command saying what to do next (stderr, so stdout stays machine-readable); commands in
    it are between backticks and run as printed (tests/docs/test_commands_in_order.py)."""
    if getattr(args, "quiet", False):
        return
    print(f"next: {text}", file=sys.stderr)


def load_input(path, names=None, write_stride=None):
    """The one input a command decodes: an ikp capture (BUFFER.npy + sidecar), another tracer's trace
    (IKET JSON / .pftrace, Proton Chrome trace) recognised by content, or a folder of captures (host_decode.load.inputs,
    through sessions.load_trace: a trace of several launches is one session; captures of several ranks put
    each rank in a track group of its own, on the clock their sidecars' offsets lead to)."""
    from host_decode.analysis.sessions import load_trace

    return load_trace([path], names=names, write_stride=write_stride)


def read_pc_table(
    kind: str,
    path,
    kernel: str | None,
    region_map=None,
    *,
    default_kernel: str | None = None,
    allow_mismatch: bool = False,
):
    """Per-PC data of `kind` (ncu | cupti | nvbit) for one kernel: the explicit --kernel; else the kernel
    with markers (the map's, else `default_kernel`, e.g. the capture's sidecar kernel) when the file has
    it; else the file's only kernel (a tool may spell the name demangled; if it is another kernel, the
    join's check says so: hardware.join.same_kernel). An ncu table lists every instruction: one that
    covers fewer than the map's is a file cut short (error unless allow_mismatch)."""
    from host_decode.core.errors import DecodeError
    from host_decode.hardware.adapters import cupti, ncu, nvbit

    reader = {"ncu": ncu.read_ncu_csv, "cupti": cupti.read_cupti_json, "nvbit": nvbit.read_nvbit_json}[kind]
    preferred = region_map.kernel if region_map is not None and region_map.kernel else default_kernel
    if kernel or not preferred:
        table = reader(str(path), kernel=kernel)
    else:
        try:
            table = reader(str(path), kernel=preferred)
        except DecodeError as first:
            try:
                table = reader(str(path))
            except DecodeError:
                raise first from None
    if kind == "ncu" and region_map is not None and table.pc.size < region_map.pc.size and not allow_mismatch:
        last = int(table.pc.max()) if table.pc.size else -1
        raise DecodeError(
            f"lists {table.pc.size} of the kernel's {region_map.pc.size} instructions (last PC {last:#x}, "
            f"code ends at {int(region_map.pc.max()):#x}): the CSV is cut short or of another build "
            "(--allow-mismatch joins anyway)",
            source=str(path),
        )
    return table


def load_map(path):
    """A pc2region map file; errors name the file (a binary file is not a UTF-8 codec error)."""
    from host_decode.core.errors import DecodeError
    from host_decode.hardware import pc2region

    try:
        return pc2region.load_map(str(path))
    except UnicodeDecodeError:
        raise DecodeError("not a pc2region map: binary data, not JSON", source=str(path)) from None


def cubin_errors(cubin_path):
    """Context: DecodeErrors inside name the user's cubin, never a temporary copy of it."""
    import contextlib
    import re

    from host_decode.core.errors import DecodeError

    @contextlib.contextmanager
    def guard():
        try:
            yield
        except DecodeError as e:
            reason = re.sub(r"\S*ikp_sass_\S*", str(cubin_path), e.reason)
            raise DecodeError(reason, source=str(cubin_path)) from None

    return guard()


def read_cubin_map(cubin_path, **build_args):
    """(cubin bytes, RegionMap built from it); errors name the user's cubin."""
    from host_decode.hardware import pc2region

    data = pc2region.read_cubin(str(cubin_path))
    with cubin_errors(cubin_path):
        return data, pc2region.build_map(data, **build_args)


def ensure_gzip(path) -> None:
    """A file whose name ends in .gz is gzip: compress it in place when a writer wrote plain text."""
    import gzip
    import os
    import shutil
    from pathlib import Path

    path = Path(path)
    if not path.name.endswith(".gz"):
        return
    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            return
    packed = path.with_name(path.name + ".gzip")
    try:
        with open(path, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(packed, path)
    finally:
        packed.unlink(missing_ok=True)


def say_left_out(trace, max_lanes: int | None) -> None:
    """Print what a merged torch trace leaves out over its lane limit (the file records it in
    ikp_alignment; the terminal must say it too).
    tests/unit/host_decode/analysis/test_align.py::test_merge_torch_says_lanes_left_out"""
    from host_decode.writers.chrome_json import keep_lanes

    left = keep_lanes(trace, max_lanes)[1]
    if left["lanes_left_out"]:
        print(f"{left['lanes_left_out']} lane(s) over the limit of {max_lanes} left out of the merged trace "
              f"({left['spans_left_out']} regions, {left['instants_left_out']} instants)")
