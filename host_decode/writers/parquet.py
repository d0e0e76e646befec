"""The decoded tables of many captures (the ranks of a distributed kernel, the launches of a session) as Apache
Parquet files that DuckDB, Polars, Spark or pandas read: one file per table, the schema in docs/export.md.

Streaming, rank by rank: each capture is decoded, its rows appended to the tables' writers (batches of
ROWS_PER_GROUP rows become row groups) and dropped before the next one is read. Matching waits to signals
needs every signal of a flag, which other ranks may have recorded: pass 1 also spills each capture's flag
events into buckets by the flag's owner rank (files in the output's temporary folder, in-memory batches of at
most SPILL_ROWS rows); pass 2 matches one bucket at a time (host_decode.analysis.flags.match_waits) and
writes the matches and the flows. Memory so holds one capture, the writers' batches and one bucket (the flag
events of RANKS_PER_BUCKET owners), whatever the number of ranks (tests/unit/host_decode/writers/
test_export.py::test_memory_does_not_grow_with_the_rank_count; time: benchmarks/ranks_bench.py).

Times are ns on the common clock: each capture's times plus its sidecar's ``clock_offset_ns``. The clock
error bound of the matching (the two largest ``clock_error_ns`` plus the timer step) is in export.json, with
every table's row count.

pyarrow is an optional dependency (the `export` extra); host_decode imports without it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Iterable

import numpy as np

from host_decode.analysis.flag_events import flag_events
from host_decode.analysis.flag_paths import FLOW_KINDS
from host_decode.analysis.flags import KINDS, OPS, REASONS, UNKNOWN, FlagTable, match_waits
from host_decode.core import wire
from host_decode.core.jsonable import dumps
from host_decode.core.model import Trace
from host_decode.load.inputs import CaptureFiles, load_file
from host_decode.load.sidecar import has_flags

ROWS_PER_GROUP = 1 << 16
SPILL_ROWS = 1 << 16
MAX_BATCHES = 16  # appends held by a table or the spill before they are written: their objects stay few
RANKS_PER_BUCKET = 16
FORMAT = "ikp-tables-1"

SPILL_DTYPE = np.dtype([
    ("event_id", "i8"), ("rank", "i4"), ("launch", "i4"), ("block", "i4"), ("group", "i4"), ("kind", "u1"),
    ("op", "u1"), ("buffer", "i4"), ("owner", "i4"), ("offset", "i8"), ("value", "i8"), ("begin_ns", "i8"),
    ("end_ns", "i8"),
])  # fmt: skip


def table_schemas() -> dict:
    """{table: [(column, pyarrow type)]}: the schema docs/export.md documents."""
    import pyarrow as pa

    i16, i32, i64, s, b = pa.int16(), pa.int32(), pa.int64(), pa.string(), pa.bool_()
    place = [("rank", i32), ("launch", i32), ("block", i32), ("group", i32)]
    return {
        "launches": [("capture", s), ("rank", i32), ("launch", i32), ("kernel", s), ("device", s),
                     ("num_blocks", i32), ("num_groups", i32), ("absolute", b), ("clock_offset_ns", i64),
                     ("clock_error_ns", i64), ("clock_reference", s), ("start_ns", i64), ("end_ns", i64),
                     ("spans", i64), ("instants", i64), ("records_lost", i64), ("flag_signals", i64),
                     ("flag_waits", i64), ("flag_problems", i64), ("unknown_addresses", i64)],
        "spans": place + [("event", i16), ("region", s), ("depth", i16), ("start_ns", i64), ("end_ns", i64),
                          ("duration_ns", i64)],
        "instants": place + [("event", i16), ("name", s), ("ts_ns", i64)],
        "flag_events": [("event_id", i64)] + place + [("kind", s), ("op", s), ("buffer", s), ("owner", i32),
                                                      ("offset", i64), ("value", i64), ("begin_ns", i64),
                                                      ("end_ns", i64)],
        "flag_matches": [("wait_id", i64), ("signal_id", i64)] + place + [
            ("buffer", s), ("owner", i32), ("offset", i64), ("value", i64), ("wait_begin_ns", i64),
            ("wait_end_ns", i64), ("blocked", b), ("reason", s), ("signal_rank", i32), ("signal_block", i32),
            ("signal_group", i32), ("signal_ns", i64), ("lag_ns", i64), ("clock_residual", b)],
        "flows": [("wait_id", i64), ("signal_id", i64), ("src_rank", i32), ("src_block", i32), ("src_group", i32),
                  ("src_ns", i64), ("dst_rank", i32), ("dst_block", i32), ("dst_group", i32), ("dst_ns", i64),
                  ("kind", s), ("buffer", s), ("owner", i32), ("offset", i64)],
    }


def require_pyarrow():
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ValueError("ikp export writes Parquet through pyarrow, which is not installed: "
                           "pip install 'ikp-cute[export]'") from None


class TableSink:
    """One Parquet file written batch by batch: columns are appended as numpy arrays (strings as (codes, names)
    pairs, nullable columns as masked arrays), held as they are and turned into one Arrow array per column when
    ROWS_PER_GROUP rows or MAX_BATCHES appends are held (one conversion per column, not per append)."""

    def __init__(self, path: Path, fields: list):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.pa, self.fields = pa, fields
        self.schema = pa.schema(fields)
        self.writer = pq.ParquetWriter(str(path), self.schema, compression="zstd")
        self.held, self.pending, self.rows = [], 0, 0

    def append(self, columns: dict) -> None:
        first = columns[self.fields[0][0]]
        n = len(first[0]) if isinstance(first, tuple) else len(first)
        if not n:
            return
        self.held.append(columns)
        self.pending += n
        self.rows += n
        if self.pending >= ROWS_PER_GROUP or len(self.held) >= MAX_BATCHES:
            self.flush()

    def _column(self, name: str, typ):
        pa, cols = self.pa, [h[name] for h in self.held]
        if isinstance(cols[0], tuple):  # (codes, names): strings through a dictionary, decoded in C++
            shift = np.cumsum([0] + [len(c[1]) for c in cols[:-1]])
            codes = np.concatenate([np.asarray(c[0], np.int32) + k for c, k in zip(cols, shift.tolist())])
            names = [x for c in cols for x in c[1]]
            return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(names, pa.string())).dictionary_decode()
        if any(isinstance(c, np.ma.MaskedArray) for c in cols):
            data = np.concatenate([np.ma.getdata(c) for c in cols])
            mask = np.concatenate([np.ma.getmaskarray(c) for c in cols])
            return pa.array(data, typ, mask=mask)
        return pa.array(np.concatenate([np.asarray(c) for c in cols]), typ)

    def flush(self) -> None:
        if self.held:
            arrays = [self._column(name, typ) for name, typ in self.fields]
            arrays = [a.cast(typ) if a.type != typ else a for a, (_, typ) in zip(arrays, self.fields)]
            self.writer.write_table(self.pa.Table.from_arrays(arrays, schema=self.schema),
                                    row_group_size=ROWS_PER_GROUP)
            self.held, self.pending = [], 0

    def close(self) -> None:
        self.flush()
        self.writer.close()


@dataclasses.dataclass
class Spill:
    """Flag events bucketed by owner rank on disk (raw SPILL_DTYPE rows), batched in memory first."""

    folder: Path
    buckets: int
    held: dict = dataclasses.field(default_factory=dict)
    rows: int = 0

    def add(self, rows: np.ndarray) -> None:
        b = rows["owner"].astype(np.int64) % self.buckets
        for k in np.unique(b).tolist():
            self.held.setdefault(k, []).append(rows[b == k])
        self.rows += rows.size
        if self.rows >= SPILL_ROWS or sum(map(len, self.held.values())) >= MAX_BATCHES:
            self.flush()

    def flush(self) -> None:
        for k, parts in self.held.items():
            with open(self.folder / f"bucket_{k}.bin", "ab") as f:
                for p in parts:
                    f.write(p.tobytes())
        self.held, self.rows = {}, 0

    def read(self, k: int) -> np.ndarray:
        path = self.folder / f"bucket_{k}.bin"
        if not path.exists():
            return np.zeros(0, SPILL_DTYPE)
        out = np.fromfile(path, SPILL_DTYPE)
        path.unlink()
        return out


def _names_lut(trace: Trace, ids: np.ndarray) -> tuple[np.ndarray, list]:
    """(codes, names) of event ids for a string column."""
    uniq, codes = np.unique(ids, return_inverse=True)
    return codes, [trace.names.event(int(e)) for e in uniq.tolist()]


def _place(trace: Trace, rank: int, launch: int, rows: np.ndarray) -> dict:
    n = rows.size
    return {"rank": np.full(n, rank, np.int32), "launch": np.full(n, launch, np.int32), "block": rows["block"],
            "group": rows["group"]}


def export_tables(paths: Iterable[str | os.PathLike], out_dir: str | os.PathLike, *, names=None,
                  progress=None) -> dict:
    """Write the tables of every capture of `paths` into the existing empty folder `out_dir`; returns the
    manifest (also written as export.json)."""
    require_pyarrow()
    out = Path(out_dir)
    files = CaptureFiles(paths)  # names, ~15 bytes a capture: what grows with the captures
    spill_dir = out / ".spill"
    spill_dir.mkdir()
    spill = Spill(spill_dir, max(1, -(-len(files) // RANKS_PER_BUCKET)))
    schemas = table_schemas()
    sinks = {name: TableSink(out / f"{name}.parquet", fields) for name, fields in schemas.items()}
    buffers: dict[str, int] = {}
    errors: list[int] = []
    next_id, ranks = 0, bytearray()  # ranks seen, a bit each
    try:
        for f in (progress(files) if progress else files):
            for trace in load_file(f, names=names):
                next_id = _export_launch(trace, f, sinks, spill, buffers, errors, next_id)
                r = int((trace.meta or {}).get("rank") or 0)
                ranks.extend(bytes(max(0, r // 8 + 1 - len(ranks))))
                ranks[r // 8] |= 1 << (r % 8)
        spill.flush()
        stated = sorted(errors, reverse=True)
        n_ranks = sum(bin(x).count("1") for x in ranks)
        bound = wire.TIMER_STEP_NS + (sum(stated[:2]) if n_ranks > 1 else 0)
        names_of = np.array(sorted(buffers, key=buffers.get) or [""], dtype=object)
        for k in range(spill.buckets):
            _export_matches(spill.read(k), names_of, bound, sinks)
    finally:
        for s in sinks.values():
            s.close()
        for leftover in spill_dir.glob("*"):
            leftover.unlink()
        spill_dir.rmdir()
    manifest = {"format": FORMAT, "captures": len(files), "ranks": n_ranks, "clock_error_bound_ns": bound,
                "timer_step_ns": wire.TIMER_STEP_NS, "tables": {n: {"file": f"{n}.parquet", "rows": s.rows}
                                                                 for n, s in sinks.items()}}
    (out / "export.json").write_text(dumps(manifest, indent=1, sort_keys=True))
    return manifest


def _export_launch(trace: Trace, path: Path, sinks: dict, spill: Spill, buffers: dict, errors: list,
                   next_id: int) -> int:
    meta = trace.meta or {}
    rank, launch = int(meta.get("rank") or 0), int(meta.get("launch_index") or 0)
    shift = int(meta.get("clock_offset_ns") or 0)
    sp = trace.spans
    sinks["spans"].append(dict(_place(trace, rank, launch, sp), event=sp["event"],
                               region=_names_lut(trace, sp["event"]), depth=sp["depth"],
                               start_ns=sp["start_ns"] + shift, end_ns=sp["end_ns"] + shift,
                               duration_ns=sp["end_ns"] - sp["start_ns"]))
    it = trace.instants
    sinks["instants"].append(dict(_place(trace, rank, launch, it), event=it["event"],
                                  name=_names_lut(trace, it["event"]), ts_ns=it["ts_ns"] + shift))
    signals = waits = problems = unknown = 0
    if has_flags(trace):
        ev = flag_events(trace)
        t = ev.table
        ids = np.arange(next_id, next_id + len(t), dtype=np.int64)
        next_id += len(t)
        gb = np.array([buffers.setdefault(name, len(buffers)) for name in t.buffers] or [0], np.int32)[t.buffer]
        rows = np.zeros(len(t), SPILL_DTYPE)
        rows["event_id"] = ids
        for name in ("rank", "launch", "block", "kind", "op", "owner", "offset", "value"):
            rows[name] = getattr(t, name)
        rows["group"], rows["buffer"] = t.warp, gb
        rows["begin_ns"], rows["end_ns"] = t.begin_ns + shift, t.end_ns + shift
        spill.add(rows)
        known = t.value != UNKNOWN
        sinks["flag_events"].append({
            "event_id": ids, "rank": t.rank, "launch": t.launch, "block": t.block, "group": t.warp,
            "kind": (t.kind, KINDS), "op": (t.op, OPS), "buffer": (t.buffer, t.buffers or ("",)), "owner": t.owner,
            "offset": t.offset, "value": np.ma.masked_array(t.value, ~known), "begin_ns": rows["begin_ns"],
            "end_ns": rows["end_ns"]})
        signals, waits = int((t.kind == 0).sum()), int((t.kind == 1).sum())
        problems, unknown = sum(ev.problems.values()), ev.unknown_addresses
    err = meta.get("clock_error_ns")
    if err is not None:
        errors.append(int(err))
        errors.sort(reverse=True)
        del errors[2:]  # the two largest are all the bound needs
    firsts = trace.lanes["first_ns"][trace.lanes["first_ns"] >= 0]
    sinks["launches"].append({
        "capture": ([0], [str(path)]), "rank": [rank], "launch": [launch],
        "kernel": ([0], [str(meta.get("kernel") or "")]),
        "device": ([0], [str(meta.get("device") or "")]), "num_blocks": [trace.num_blocks],
        "num_groups": [trace.num_groups], "absolute": [trace.absolute], "clock_offset_ns": [shift],
        "clock_error_ns": np.ma.masked_array([err or 0], [err is None]),
        "clock_reference": ([0], [str(meta.get("clock_reference") or "")]),
        "start_ns": [int(firsts.min()) + shift if firsts.size else 0], "end_ns": [trace.end_ns + shift],
        "spans": [sp.size], "instants": [it.size], "records_lost": [trace.loss.lost], "flag_signals": [signals],
        "flag_waits": [waits], "flag_problems": [problems], "unknown_addresses": [unknown]})
    return next_id


def _export_matches(rows: np.ndarray, names_of: np.ndarray, bound: int, sinks: dict) -> None:
    if not rows.size:
        return
    table = FlagTable(rank=rows["rank"], launch=rows["launch"], block=rows["block"], warp=rows["group"],
                      kind=rows["kind"], buffer=rows["buffer"], offset=rows["offset"], owner=rows["owner"],
                      value=rows["value"], op=rows["op"], begin_ns=rows["begin_ns"], end_ns=rows["end_ns"])
    m = match_waits(table, clock_error_ns=bound)
    w, s = m.wait_rows, m.signal
    ok = s >= 0
    sr = np.where(ok, s, 0)
    residual = ok & (m.lag_ns < 0)
    r = rows
    sig_ns = np.ma.masked_array(r["end_ns"][sr], ~ok)
    bufs = r["buffer"][w]
    sinks["flag_matches"].append({
        "wait_id": r["event_id"][w], "signal_id": np.ma.masked_array(r["event_id"][sr], ~ok), "rank": r["rank"][w],
        "launch": r["launch"][w], "block": r["block"][w], "group": r["group"][w], "buffer": (bufs, names_of),
        "owner": r["owner"][w], "offset": r["offset"][w], "value": r["value"][w], "wait_begin_ns": r["begin_ns"][w],
        "wait_end_ns": r["end_ns"][w], "blocked": m.blocked(), "reason": (m.reason, REASONS),
        "signal_rank": np.ma.masked_array(r["rank"][sr], ~ok), "signal_block": np.ma.masked_array(r["block"][sr], ~ok),
        "signal_group": np.ma.masked_array(r["group"][sr], ~ok), "signal_ns": sig_ns,
        "lag_ns": np.ma.masked_array(m.lag_ns, ~ok), "clock_residual": residual})
    f = np.flatnonzero(ok)
    ws, ss = w[f], s[f]
    sinks["flows"].append({
        "wait_id": r["event_id"][ws], "signal_id": r["event_id"][ss], "src_rank": r["rank"][ss],
        "src_block": r["block"][ss], "src_group": r["group"][ss],
        "src_ns": np.minimum(r["end_ns"][ss], r["end_ns"][ws]), "dst_rank": r["rank"][ws], "dst_block": r["block"][ws],
        "dst_group": r["group"][ws], "dst_ns": r["end_ns"][ws],
        "kind": (residual[f].astype(np.int64), FLOW_KINDS),
        "buffer": (r["buffer"][ws], names_of), "owner": r["owner"][ws], "offset": r["offset"][ws]})
