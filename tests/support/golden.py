"""Golden outputs of the shipped captures: what they decode to and the bytes each trace writer produces.

tests/golden/test_golden_outputs.py compares the current code with tests/fixtures/golden/outputs.json, which
was recorded at commit 54ecf9c (before host_decode moved into subpackages). This module is both the
recorder and the comparison's helper, so the two can never disagree on what is hashed.

A deliberate change of an output format updates the fixture with one command, run from the repository
root and committed together with the change that made it (the diff of outputs.json shows which hashes
moved):

    python tests/support/golden.py --regen                      # every capture, from the current code
    python tests/support/golden.py --regen examples/x/cap.npy   # only these captures (e.g. re-recorded ones)
    python tests/support/golden.py --add-new                    # only captures that have no record yet

What is recorded per capture (examples/**/*.npy with a .json sidecar next to it):
* ``spans`` / ``instants``: row counts, and sha256 of the rows sorted by every column, each column as
  little-endian int64 (row order and column widths may change; the content may not);
* ``nonzero_slots`` and ``lost`` from the loss report;
* ``input_sha256``: the capture and its sidecar, so that a failure tells a changed input from a changed
  decoder or writer;
* ``recorded_from``: what made the record (``--source``).
* ``outputs``: sha256 of the files written by
  - ``default.pftrace`` / ``default.json``: ``ikp decode CAPTURE -o FILE`` (the writers' defaults:
    these move when a default changes on purpose, e.g. issue 16's smaller default .pftrace);
  - ``args.pftrace`` / ``args.json``: ``write_trace`` with slice args and lane counters on and no gzip
    (``TraceOptions(slice_args=True, lane_counters="on", gzip=False)``; the Perfetto writer draws its
    overlays, e.g. the pipeline flows and counters), a configuration that stays fixed while defaults move.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "golden" / "outputs.json"
OUTPUTS = ("default.pftrace", "default.json", "args.pftrace", "args.json")


def find_captures(root: Path) -> list[str]:
    """Paths (relative to root, '/'-separated) of every examples/**/*.npy that has a .json sidecar."""
    npys = (root / "examples").rglob("*.npy")
    return sorted(p.relative_to(root).as_posix() for p in npys if p.with_suffix(".json").is_file())


def table_digest(table) -> str:
    """sha256 of a structured array's rows, sorted by every column, each column as '<i8'."""
    import numpy as np

    cols = [np.ascontiguousarray(table[name].astype("<i8")) for name in table.dtype.names]
    order = np.lexsort(cols[::-1]) if table.size else np.zeros(0, dtype=np.int64)
    h = hashlib.sha256(",".join(table.dtype.names).encode())
    for col in cols:
        h.update(col[order].tobytes())
    return h.hexdigest()


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _module(name: str):
    """host_decode.<name> in the layout after issue 14, else its flat name at 54ecf9c (where the
    fixture was first recorded)."""
    import importlib

    try:
        return importlib.import_module(f"host_decode.{name}")
    except ImportError:
        return importlib.import_module(f"host_decode.{name.rsplit('.', 1)[-1]}")


def _load_capture(path):
    """load_capture of this layout (host_decode.load.capture), else of the layouts the fixture knew."""
    try:
        load = _module("load.capture").load_capture
    except ImportError:
        load = _module("core.decoder").load_capture
    return load(path)


def write_explicit(trace, path: Path) -> None:
    """The fixed configuration: slice args on, lane counters on, no gzip, the writer's overlays drawn
    (whatever the defaults are)."""
    from host_decode.writers import write_trace

    params = inspect.signature(write_trace).parameters
    if "options" in params:
        from host_decode.writers import TraceOptions

        write_trace(trace, path, TraceOptions(slice_args=True, lane_counters="on", gzip=False))
    elif "args" in params:
        write_trace(trace, path, gzip=False, args=True, counters=True)
    elif path.suffix == ".pftrace":  # write_trace without an args switch: the writers' own entry points
        _module("writers.perfetto").write_perfetto(trace, path, gzip=False, args=True, counters=True)
    else:
        _module("writers.chrome_json").write_chrome_json(trace, path, gzip=False, args=True, counters=True)


def write_default(capture: Path, path: Path) -> None:
    """`ikp decode CAPTURE -o PATH -q`, in process."""
    from host_decode.cli import main

    rc = main(["decode", str(capture), "-o", str(path), "-q"])
    if rc != 0:
        raise RuntimeError(f"ikp decode {capture} -o {path} exited with {rc}")


def input_digest(capture: Path) -> str:
    h = hashlib.sha256()
    for path in (capture, capture.with_suffix(".json")):
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def record(root: Path, rel: str, workdir: Path, source: str = "") -> dict:
    """What `rel` decodes to and the sha256 of every output in OUTPUTS (files written under workdir)."""
    capture = root / rel
    trace = _load_capture(capture)
    entry = {
        "recorded_from": source,
        "input_sha256": input_digest(capture),
        "spans": int(trace.spans.size),
        "spans_sha256": table_digest(trace.spans),
        "instants": int(trace.instants.size),
        "instants_sha256": table_digest(trace.instants),
        "nonzero_slots": int(trace.loss.nonzero_slots),
        "lost": int(trace.loss.lost),
        "outputs": {},
    }
    stem = rel.replace("/", "__").removesuffix(".npy")
    for name in OUTPUTS:
        out = workdir / f"{stem}.{name}"
        if name.startswith("default."):
            write_default(capture, out)
        else:
            write_explicit(trace, out)
        entry["outputs"][name] = file_digest(out)
    return entry


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--regen", nargs="*", metavar="CAPTURE",
                      help="record these captures (default: all) again from the current code")
    mode.add_argument("--add-new", action="store_true", help="record only the captures missing from the fixture")
    p.add_argument("--root", type=Path, default=ROOT, help="tree whose examples/ are recorded (default: this one)")
    p.add_argument("--out", type=Path, default=FIXTURE, help=f"fixture file (default: {FIXTURE.relative_to(ROOT)})")
    p.add_argument("--source", default="tests/support/golden.py --regen",
                   help="what the record was made from (stored per capture)")
    args = p.parse_args(argv)

    present = find_captures(args.root)
    old = json.loads(args.out.read_text()) if args.out.is_file() else {"captures": {}}
    captures = {rel: e for rel, e in old["captures"].items() if rel in present}
    if args.add_new:
        todo = [rel for rel in present if rel not in captures]
    else:
        todo = [Path(rel).as_posix() for rel in args.regen] or present
        unknown = sorted(set(todo) - set(present))
        if unknown:
            p.error(f"not a capture under {args.root}/examples (.npy + .json sidecar): {', '.join(unknown)}")
    with tempfile.TemporaryDirectory() as tmp:
        for rel in todo:
            captures[rel] = record(args.root, rel, Path(tmp), args.source)
            print(f"recorded {rel}")
    fixture = {
        "about": "sha256 of what each shipped capture decodes to and writes; see tests/support/golden.py",
        "captures": dict(sorted(captures.items())),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(fixture, indent=1, sort_keys=False) + "\n")
    print(f"wrote {args.out} ({len(captures)} captures, {len(todo)} recorded now)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
