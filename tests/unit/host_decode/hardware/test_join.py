"""The per-region join: conservation (per-region sums == input totals), sample moves, inclusive
sums by prefix, ratios from summed numerators, the cubin-mismatch check, trace attachment, the CLI."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from host_decode.core.errors import DecodeError
from host_decode.core.model import (
    INSTANT_DTYPE,
    LANE_DTYPE,
    LOSS_BUCKETS,
    SPAN_DTYPE,
    LossReport,
    Names,
    Trace,
)
from host_decode.hardware import join, pc2region, sass
from host_decode.hardware.adapters import PcTable, cupti, ncu, nvbit

TESTS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # tests/
FIX = os.path.join(TESTS, "fixtures", "pc")
CUBIN = os.path.join(TESTS, "kernels_pc2region", "markers.sm_90a.cubin")
NAMES = {1: "outer", 2: "body", 3: "slow", 4: "inner"}


pytestmark = pytest.mark.skipif(not sass.nvdisasm_available(), reason="nvdisasm not installed")


@pytest.fixture(scope="module")
def region_map():
    return pc2region.build_map(open(CUBIN, "rb").read(), names=NAMES)


def _tables():
    return {
        "ncu": ncu.read_ncu_csv(os.path.join(FIX, "markers_synthetic_ncu.csv")),
        "cupti": cupti.read_cupti_json(os.path.join(FIX, "markers_synthetic_cupti.json"), kernel="markers"),
        "nvbit": nvbit.read_nvbit_json(os.path.join(FIX, "markers_synthetic_nvbit.json")),
    }


@pytest.mark.parametrize("source", ["ncu", "cupti", "nvbit"])
@pytest.mark.parametrize("move", [True, False])
def test_conservation(region_map, source, move):
    table = _tables()[source]
    r = join.join(region_map, table, move_samples=move)
    assert r.check["ok"]
    inputs = dict(table.counters)
    inputs.update({f"stall_{k}": v for k, v in table.stalls.items()})
    inputs.update({f"stallni_{k}": v for k, v in table.stalls_not_issued.items()})
    for col, values in inputs.items():
        assert r.columns[col].sum() == pytest.approx(values.sum()), col  # every bucket, nothing lost
        assert r.totals[col] == pytest.approx(values.sum())
        assert np.all(r.marker_columns[col] <= r.columns[col] + 1e-9)
    if "samples" in r.columns:  # per bucket: the reasons add up to the samples
        reasons = sum(r.columns[f"stall_{k}"] for k in table.stalls)
        assert np.allclose(reasons, r.columns["samples"])


def _row(rows, path):
    return next(x for x in rows if x["path"] == path)


def test_drain_samples_after_exit_move_to_the_exit(region_map):
    table = _tables()["ncu"]
    moved = join.join(region_map, table).rows()
    kept = join.join(region_map, table, move_samples=False).rows()
    # the 400 drain samples the fixture puts on the PC after EXIT (helper()'s first instruction)
    assert _row(kept, "outer/slow")["stall_drain"] == 400
    assert _row(moved, "outer/slow")["stall_drain"] == 3  # only the padding's 3 (moved onto the RET, below)
    assert _row(moved, "<outside>")["stall_drain"] == _row(kept, "<outside>")["stall_drain"] + 400
    # helper()'s genuine samples at that PC (other reasons) stay with it
    assert _row(moved, "outer/slow")["stall_selected"] == _row(kept, "outer/slow")["stall_selected"]
    # zero-execution padding: its samples go to the last executed PC (the RET, in outer/slow)
    assert _row(kept, "<unreachable>")["samples"] == 3
    assert _row(moved, "<unreachable>")["samples"] == 0


def test_without_execution_counts_unreachable_pcs_still_give_up_samples(region_map):
    r = join.join(region_map, _tables()["cupti"])
    assert _row(r.rows(), "<unreachable>")["samples"] == 0
    assert r.moved_samples == pytest.approx(403)


def test_inclusive_is_the_sum_over_the_prefix_and_ratios_are_recomputed(region_map):
    r = join.join(region_map, _tables()["ncu"])
    exc, inc = r.rows(False), r.rows(True)
    outer = _row(inc, "outer")
    parts = [_row(exc, p) for p in ("outer", "outer/body", "outer/slow", "outer/inner")]
    for col in ("inst_executed", "samples", "stall_long_sb", "thread_inst_executed"):
        assert outer[col] == pytest.approx(sum(p[col] for p in parts))
    # a fraction of summed numerators and denominators, not the mean of the parts' fractions
    assert outer["stall_fractions"]["long_sb"] == pytest.approx(outer["stall_long_sb"] / outer["samples"])
    mean_of_parts = np.mean([p["stall_fractions"].get("long_sb", 0) for p in parts])
    assert outer["stall_fractions"]["long_sb"] != pytest.approx(mean_of_parts)
    assert outer["predicated_on_ratio"] == pytest.approx(
        outer["pred_on_thread_inst_executed"] / outer["thread_inst_executed"]
    )
    assert sum(x["samples_share"] for x in exc) == pytest.approx(1.0)


def test_instrumentation_cost_is_reported(region_map):
    r = join.join(region_map, _tables()["ncu"])
    body = _row(r.rows(), "outer/body")
    assert 0 < body["marker_inst_executed"] < body["inst_executed"]
    assert r.instrumentation()["marker_inst_executed"] == pytest.approx(
        sum(x.get("marker_inst_executed", 0) for x in r.rows())
    )


def test_opcode_mismatch_is_refused(region_map):
    t = _tables()["ncu"]
    bad = dataclasses.replace(t, opcode=list(t.opcode))
    bad.opcode[5] = "HMMA.16816.F32"
    with pytest.raises(DecodeError, match="opcode"):
        join.join(region_map, bad)
    r = join.join(region_map, bad, force=True)
    assert not r.check["ok"] and r.check["opcode_mismatches"] == 1


def test_pcs_beyond_the_map_are_refused_or_bucketed(region_map):
    t = _tables()["nvbit"]
    extra = PcTable(
        "nvbit",
        "markers",
        np.append(t.pc, region_map.code_size + 0x100),
        {"inst_executed": np.append(t.counters["inst_executed"], 7)},
        {},
    )
    with pytest.raises(DecodeError, match="not in the map"):
        join.join(region_map, extra)
    r = join.join(region_map, extra, force=True)
    assert _row(r.rows(), join.NOT_IN_MAP)["inst_executed"] == 7
    assert r.columns["inst_executed"].sum() == extra.counters["inst_executed"].sum()


def test_executed_unreachable_pc_means_mismatch(region_map):
    t = _tables()["nvbit"]
    pad = int(region_map.pc[region_map.region == region_map.paths.index(pc2region.UNREACHABLE)][0])
    pcs = np.append(t.pc, pad)
    order = np.argsort(pcs)
    bad = PcTable(
        "nvbit", "markers", pcs[order], {"inst_executed": np.append(t.counters["inst_executed"], 16)[order]}, {}
    )
    with pytest.raises(DecodeError, match="unreachable were executed"):
        join.join(region_map, bad)


def test_mismatch_error_names_the_data_file_and_the_cli_flag(region_map):
    """--force only replaces output files; the flag that joins anyway is --allow-mismatch. The error
    names the CSV, not the tool."""
    t = _tables()["ncu"]
    bad = dataclasses.replace(t, opcode=list(t.opcode))
    bad.opcode[5] = "HMMA.16816.F32"
    with pytest.raises(DecodeError) as e:
        join.join(region_map, bad)
    assert e.value.source == os.path.join(FIX, "markers_synthetic_ncu.csv")
    assert "--allow-mismatch" in e.value.reason and "--force" not in e.value.reason


def test_data_of_another_kernel_is_a_mismatch(tmp_path, capsys):
    """A file holding only another kernel's data was read as the kernel's (read_pc_table falls back to
    the file's only kernel) and joined with check ok: the names must agree, up to mangling."""
    from host_decode.cli import main

    out_map = tmp_path / "map.json"
    assert main(["pc2region", CUBIN, "-o", str(out_map)]) == 0
    m = pc2region.load_map(str(out_map))
    records = [{"function_name": "markers_v2", "pc_offset": int(pc), "stalls": {"0": 1}} for pc in m.pc[:8]]
    data = tmp_path / "pcsamp.json"
    data.write_text(json.dumps({"format": cupti.FORMAT, "stall_reasons": {"0": "wait"}, "records": records}))
    capsys.readouterr()
    assert main(["join", "--map", str(out_map), "--cupti", str(data)]) == 2
    assert "the data is of kernel 'markers_v2', the map of 'markers'" in capsys.readouterr().err
    assert main(["join", "--map", str(out_map), "--cupti", str(data), "--allow-mismatch"]) == 1  # shown, not ok
    assert "MISMATCH" in capsys.readouterr().out
    assert join.same_kernel("_ZN2ns7markersIiEEvPfi", "void ns::markers<int>(float *, int)")
    assert not join.same_kernel("markers", "markers_v2")


def test_external_region_agreement(region_map):
    r = join.join(region_map, _tables()["nvbit"])
    assert 0.85 < r.check["external_region_agreement"] < 1.0  # the fixture's NOPs say "<none>"
    assert all(d["data"] == "<none>" for d in r.check["external_region_disagreements"])


def _empty_trace(events):
    per_lane = np.zeros(0, [("lane", np.int64)] + [(b, np.int64) for b in LOSS_BUCKETS])
    loss = LossReport(0, dict.fromkeys(LOSS_BUCKETS, 0), per_lane, {}, 0)
    return Trace(
        1,
        1,
        1,
        np.zeros(0, SPAN_DTYPE),
        np.zeros(0, INSTANT_DTYPE),
        np.zeros(0, LANE_DTYPE),
        loss,
        Names(events=events),
        False,
    )


def test_attach_to_trace_uses_the_trace_names(region_map):
    trace = _empty_trace({1: "OUTER", 2: "BODY", 3: "SLOW", 4: "INNER"})
    r = join.join(region_map, _tables()["ncu"])
    payload = join.attach_to_trace(trace, r)
    assert trace.meta["regions_hw"] is payload
    assert {x["path"] for x in payload["inclusive"]} == {"OUTER", "OUTER/BODY", "OUTER/SLOW", "OUTER/INNER"}
    assert payload["by_event"]["2"]["paths"] == ["OUTER/BODY"]
    assert payload["by_event"]["1"]["samples"] == pytest.approx(_row(r.rows(True), "outer")["samples"])
    json.dumps(payload)  # JSON-serializable as is


def test_cli_pc2region_and_join(tmp_path, capsys):
    from host_decode.cli import main

    names = tmp_path / "names.json"
    names.write_text(json.dumps({"events": {str(k): v for k, v in NAMES.items()}}))
    out_map = tmp_path / "map.json"
    assert main(["pc2region", CUBIN, "-o", str(out_map), "--names", str(names)]) == 0
    out_json = tmp_path / "regions.json"
    assert (
        main(
            [
                "join",
                "--map",
                str(out_map),
                "--ncu",
                os.path.join(FIX, "markers_synthetic_ncu.csv"),
                "-o",
                str(out_json),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "outer/slow" in text and "cubin check: ok" in text
    obj = json.loads(out_json.read_text())
    assert obj["format"] == join.JOIN_FORMAT and obj["check"]["ok"]
    assert sum(x["samples"] for x in obj["exclusive"]) == pytest.approx(obj["totals"]["samples"])
    # a CSV of another kernel: exit code 2 with a clear message, no traceback
    bad = tmp_path / "bad.csv"
    bad.write_text('"Kernel Name","other",\n"Address","Source","Instructions Executed"\n"0x10","NOP","1"\n')
    assert main(["join", "--map", str(out_map), "--ncu", str(bad)]) == 2


# ================================================================================================
# real captures from the GPU machine (gpu/pc_profile.py -> $OUT/fixtures/, committed here when recorded)
# ================================================================================================

REAL = [("ncu", "tiles_real_ncu.csv", ncu.read_ncu_csv), ("cupti", "tiles_real_cupti.json.gz", cupti.read_cupti_json)]


@pytest.mark.parametrize("source,data,reader", REAL, ids=[r[0] for r in REAL])
def test_real_capture_joins_and_conserves(source, data, reader):
    map_path = os.path.join(FIX, f"tiles_real_{source}.map.json")
    data_path = os.path.join(FIX, data)
    if not (os.path.exists(map_path) and os.path.exists(data_path)):
        pytest.skip(f"no real {source} capture committed yet (run gpu/pc_profile.py on the GPU machine)")
    m = pc2region.load_map(map_path)
    table = reader(data_path, kernel=m.kernel) if source == "cupti" else reader(data_path)
    r = join.join(m, table)
    assert r.check["ok"], r.check["reasons"]
    for col, total in r.totals.items():
        assert r.columns[col].sum() == pytest.approx(total), col
    real = [x for x in r.rows() if not x["path"].startswith("<")]
    assert real and sum(x["samples"] for x in real) > 0  # samples land in named regions
    assert _row(r.rows(), "<unreachable>")["samples"] == 0


@pytest.mark.parametrize("source", ["ncu", "cupti"])
def test_real_cubin_maps_the_same_here(source):
    """The map computed here (nvdisasm wheel) equals the one computed on the GPU machine (its CUDA)."""
    cubin = os.path.join(FIX, f"tiles_real_{source}.cubin")
    map_path = os.path.join(FIX, f"tiles_real_{source}.map.json")
    if not (os.path.exists(cubin) and os.path.exists(map_path)):
        pytest.skip("no real cubin committed yet")
    theirs = pc2region.load_map(map_path)
    ours = pc2region.build_map(open(cubin, "rb").read(), names=theirs.events)
    assert ours.cubin_sha256 == theirs.cubin_sha256
    assert ours.paths == theirs.paths and np.array_equal(ours.region, theirs.region)


def test_cli_join_names_regions_from_a_capture(tmp_path, capsys):
    from host_decode.cli import main
    from host_decode.core import wire
    from host_decode.load.capture import save_capture

    out_map = tmp_path / "map.json"
    assert main(["pc2region", CUBIN, "-o", str(out_map)]) == 0  # no names: event_<id>
    records = wire.pack_records(np.array([100, 200]), np.array([0, 0]), np.array([1, 1]), np.array([0, 1]))
    buf = np.concatenate([[wire.pack_header(1, 1)], records]).astype(np.uint64)
    cap = tmp_path / "cap.npy"
    save_capture(
        str(cap),
        buf,
        Names(events={1: "MAIN", 2: "STEP"}),
        write_stride=1,
        records_per_lane=2,
        num_blocks=1,
        num_groups=1,
    )
    capsys.readouterr()
    assert (
        main(
            [
                "join",
                "--map",
                str(out_map),
                "--nvbit",
                os.path.join(FIX, "markers_synthetic_nvbit.json"),
                "--trace",
                str(cap),
                "--inclusive",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "MAIN/STEP" in text and "MAIN/event_3" in text


def test_attach_from_the_json_written_by_ikp_join(region_map, tmp_path):
    r = join.join(region_map, _tables()["cupti"])
    path = tmp_path / "regions.json"
    path.write_text(json.dumps(r.to_json()))
    direct = join.attach_to_trace(_empty_trace({1: "A", 2: "B"}), r)
    trace = _empty_trace({1: "A", 2: "B"})
    loaded = join.attach_to_trace(trace, str(path))
    assert loaded["by_event"] == direct["by_event"]
    assert "A/B" in {x["path"] for x in loaded["inclusive"]}
    with pytest.raises(DecodeError, match="not a per-region join"):
        join.attach_to_trace(trace, {"format": "x"})


def test_table_is_built_from_the_json_and_hardware_never_imports_reports(region_map):
    """hardware/ returns data (the join's JSON); the table is the reports stage's, built from that JSON."""
    from host_decode.reports.tables.hardware import join_items

    r = join.join(region_map, _tables()["ncu"])
    table, footer = join_items(r.to_json())
    assert table.columns[0].header == "region" and table.columns[0].text
    assert {row["path"] for row in table.rows} >= {p for p in r.paths if not p.startswith("<")} - {
        row["path"] for row in r.rows() if not row.get("samples") and not row.get("inst_executed")
    }
    assert footer.startswith("cubin check: ok")
    import ast
    import pathlib

    hardware = pathlib.Path(join.__file__).parent
    for path in hardware.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not any(n.startswith(("host_decode.reports", "host_decode.cli")) for n in names), path
