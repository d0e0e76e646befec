"""`ikp export` (host_decode/writers/parquet.py): the Parquet tables say what the in-memory analysis says, the
export of 1,024 synthetic rank captures works in memory that does not grow with the rank count, and its output
appears whole or not at all."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from host_decode.analysis.flag_paths import analyze_flags
from host_decode.analysis.flags import REASONS, WAIT
from host_decode.analysis.sessions import load_trace
from host_decode.cli import main
from host_decode.writers.parquet import export_tables
from tests.support.flag_scenarios import all_gather, ring

ROOT = Path(__file__).resolve().parents[4]
pq = pytest.importorskip("pyarrow.parquet", reason="the export extra (pyarrow) is not installed")


def read(folder, table) -> dict:
    return pq.read_table(folder / f"{table}.parquet").to_pydict()


def test_tables_say_what_the_analysis_says(tmp_path):
    caps = tmp_path / "ranks"
    caps.mkdir()
    all_gather(caps, 4, blocks=3, delay=(3, 2, 12_000), seed=9)
    out = tmp_path / "tables"
    out.mkdir()
    manifest = export_tables([caps], out)
    trace = load_trace([caps])
    fa = analyze_flags(trace)
    t, m = fa.events.table, fa.match
    assert manifest["ranks"] == 4 and manifest["clock_error_bound_ns"] == fa.error_bound_ns
    # spans: every region, on the common clock (the merged trace is placed by the same offsets)
    spans = read(out, "spans")
    assert len(spans["rank"]) == trace.spans.size == manifest["tables"]["spans"]["rows"]
    assert sorted(spans["start_ns"]) == sorted(trace.spans["start_ns"].tolist())
    # matches: the same wait -> signal pairs and reasons as the in-memory matching
    def key(rank, block, group, ns):
        return (rank, block, group, ns)
    want = {}
    for i, w in enumerate(m.wait_rows.tolist()):
        s = int(m.signal[i])
        want[key(int(t.rank[w]), int(t.block[w]), int(t.warp[w]), int(m.end_ns[w]))] = (
            REASONS[m.reason[i]], None if s < 0 else key(int(t.rank[s]), int(t.block[s]), int(t.warp[s]),
                                                        int(m.end_ns[s])))
    got = read(out, "flag_matches")
    have = {key(got["rank"][i], got["block"][i], got["group"][i], got["wait_end_ns"][i]): (
        got["reason"][i], None if got["signal_rank"][i] is None else key(
            got["signal_rank"][i], got["signal_block"][i], got["signal_group"][i], got["signal_ns"][i]))
        for i in range(len(got["rank"]))}
    assert have == want and len(want) == int((t.kind == WAIT).sum()) > 0
    flows = read(out, "flows")
    assert len(flows["src_ns"]) == int((m.signal >= 0).sum())
    assert all(a <= b for a, b in zip(flows["src_ns"], flows["dst_ns"]))
    launches = read(out, "launches")
    assert launches["rank"] == [0, 1, 2, 3]
    assert launches["clock_offset_ns"] == [p.clock_offset_ns for p in fa.events.parts]
    events = read(out, "flag_events")
    assert len(events["event_id"]) == len(t) and set(events["buffer"]) == {"flags"}
    assert all(v is None for v, k in zip(events["value"], events["kind"]) if k == "signal")  # adds: derived values


MEASURE = """
import gc, json, sys, tracemalloc
from pathlib import Path
from host_decode.writers.parquet import export_tables
warm_in, folder, out = map(Path, sys.argv[1:4])
export_tables([warm_in], out / "warm")  # imports and first-use caches out of the measurement
gc.collect()
gc.set_threshold(20)  # numpy's .npy header reader leaves cycles: collected promptly, the peak is live data
tracemalloc.start()
peaks = []
for k in range(REPEATS):  # the least of the peaks: a collection that came late in one export does not count
    gc.collect()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    manifest = export_tables([folder], out / str(k))
    peaks.append(tracemalloc.get_traced_memory()[1] - before)
print(json.dumps({"peaks": peaks, "manifest": manifest}))
"""
REPEATS = 3


def peak_of(folder, tmp_path, name, warm_in) -> tuple[int, dict]:
    """The least of REPEATS tracemalloc peaks of one export each (above what was held before it), in a fresh
    interpreter (what earlier tests left in this one does not count)."""
    out = tmp_path / name
    for sub in ("warm", *map(str, range(REPEATS))):
        (out / sub).mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", MEASURE.replace("REPEATS", str(REPEATS)), str(warm_in), str(folder),
                        str(out)], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(r.stdout.splitlines()[-1])
    return min(data["peaks"]), data["manifest"]


# what may grow with the captures: their names (load.inputs.CaptureFiles, ~15 bytes a capture) and the export's
# bookkeeping: the least peaks grew 70-90 bytes a capture from 128 to 1,024 ranks (2026-11-29, 2 cores); a
# capture's own rows held on (a span table, a batch of flag events) are hundreds of bytes and more
PER_CAPTURE_BYTES = 128
SLACK_BYTES = 32 << 10  # the least peaks' own spread between runs (allocator and collection timing)


def test_memory_does_not_grow_with_the_rank_count(tmp_path):
    small, large, warm = tmp_path / "r128", tmp_path / "r1024", tmp_path / "r48"
    for folder, n in ((small, 128), (large, 1024), (warm, 48)):
        folder.mkdir()
        ring(folder, n, blocks=1, seed=n)
    peak_small, _ = peak_of(small, tmp_path, "t128", warm)
    peak_large, manifest = peak_of(large, tmp_path, "t1024", warm)
    assert manifest["captures"] == manifest["ranks"] == 1024
    rows = {k: v["rows"] for k, v in manifest["tables"].items()}
    assert rows["launches"] == 1024 and rows["flag_matches"] == rows["flows"] == 1024 and rows["flag_events"] == 2048
    matches = read(tmp_path / "t1024" / "0", "flag_matches")
    assert set(matches["reason"]) == {"matched"}
    assert all(s == (w - 1) % 1024 for w, s in zip(matches["rank"], matches["signal_rank"]))  # ring: from r - 1
    # eight times the ranks, about the same peak (~310-340 KB at 128 ranks): a bound of a few bytes a capture
    # plus a fixed slack, not a ratio, so that anything held per capture shows (each capture's span table held
    # on, a few rows here, added 211 KB against 147 KB allowed)
    allowed = peak_small + PER_CAPTURE_BYTES * (1024 - 128) + SLACK_BYTES
    assert peak_large <= allowed, (peak_small, peak_large, allowed)


def test_output_is_whole_or_absent(tmp_path, capsys):
    caps = tmp_path / "ranks"
    caps.mkdir()
    ring(caps, 3)
    (tmp_path / "tables").mkdir()
    assert main(["export", str(caps), "-o", str(tmp_path / "tables")]) == 2  # an existing folder is never touched
    assert "a folder of that name exists" in capsys.readouterr().err
    (caps / "rank_00001.npy").write_bytes(b"not a capture")
    assert main(["export", str(caps), "-o", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ranks", "tables"]
    (caps / "rank_00001.npy").unlink()
    (caps / "rank_00001.json").unlink()
    assert main(["export", str(caps), "-o", str(tmp_path / "new"), "-q"]) == 0
    manifest = json.loads((tmp_path / "new" / "export.json").read_text())
    assert manifest["captures"] == 2 and sorted(p.name for p in (tmp_path / "new").iterdir()) == sorted(
        ["export.json"] + [f"{t}.parquet" for t in manifest["tables"]])
    # rank 2's wait on rank 1's flag has no signal now
    matches = read(tmp_path / "new", "flag_matches")
    assert sorted(matches["reason"]) == ["matched", "matched", "no_signal", "no_signal"]
    assert np.isnan(np.array(matches["signal_ns"], float)).sum() == 2
