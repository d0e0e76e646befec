"""`ikp report`: the data embedded in the page, read back out of the HTML and checked against
host_decode's own computations (stats, analysis, pc2region + join).

Inputs: a synthetic capture shaped like tests/kernels_pc2region/markers.cu (regions outer, body, slow,
inner; a second group with its own region), the real pc2region map of that kernel's committed cubin
(nvdisasm from the nvidia-cuda-nvdisasm wheel), a synthetic Nsight Compute source-page CSV over that
map's PCs, and markers.cu as the source. The committed real capture (examples/basic) is used too when
it exists.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from host_decode.analysis.stats import region_summary
from host_decode.core.model import Names
from host_decode.load.capture import load_capture, save_capture
from tests.support.report import (
    GROUPS,
    NAMES,
    REAL_CAPTURE,
    SOURCE,
    STALLS,
    counts_only_table,
    full_report,
    real_cli_args,
    real_hw_set,
    sampling_only_table,
    synthetic_buffer,
)

# --------------------------------------------------------------------------------------- inputs


def strict_loads(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


# --------------------------------------------------------------------------------------- timeline data


def _check_regions_against_stats(trace, data):
    summary = region_summary(trace)
    assert len(data["regions"]) == summary.size > 0
    for row, ref in zip(data["regions"], summary):
        assert (row["group"], row["event"]) == (int(ref["group"]), int(ref["event"]))
        assert row["region"] == trace.names.event(ref["event"])
        assert row["count"] == int(ref["count"]) and row["total_ns"] == int(ref["total_ns"])
        for p in ("p50_ns", "p90_ns", "p99_ns", "mean_ns"):
            assert row[p] == pytest.approx(float(ref[p]))
        assert sum(row["hist_counts"]) == row["count"]
        assert row["hist_edges_ns"][0] <= row["min_ns"] and row["hist_edges_ns"][-1] >= row["max_ns"]
        widths = np.diff(row["hist_edges_ns"])
        if row["count"] and not np.any(trace.durations()[(trace.spans["group"] == row["group"])
                                                          & (trace.spans["event"] == row["event"])] % 32):
            assert np.all(widths % 32 == 0) and len(widths) <= 24  # whole timer steps, no comb


def test_timeline_data_matches_stats_and_loss(tmp_path):
    from host_decode.reports.html import build_report_data, extract_data, render_html

    path = save_capture(tmp_path / "c.npy", synthetic_buffer(), NAMES, kernel="markers")
    trace = load_capture(path)
    page = render_html(build_report_data(trace))
    data = extract_data(page)
    _check_regions_against_stats(trace, data)
    assert data["loss"]["nonzero_slots"] == trace.loss.nonzero_slots
    assert data["loss"]["paired_begin"] == trace.loss.totals["paired_begin"]
    assert data["loss"]["lost"] == trace.loss.lost == 0
    assert data["kernel"]["name"] == "markers" and data["kernel"]["num_blocks"] == 16
    assert data["kernel"]["sms_seen"] == 4
    # the region with the slow block: block 5's body is 6x longer -> the tail/imbalance flags fire
    body = next(r for r in data["regions"] if r["region"] == "body")
    per_block = np.bincount(trace.spans["block"][trace.spans["event"] == 2],
                            weights=trace.durations()[trace.spans["event"] == 2])
    assert body["block_imbalance"] == pytest.approx(per_block.max() / per_block.mean())
    assert body["stands_out"]["kind"] in ("tail", "imbalance")
    # what is missing is said, with how to collect it
    assert set(data["missing"]) >= {"map", "hardware", "source"}
    assert "ncu" in data["missing"]["hardware"] and "--source" in data["missing"]["source"]
    assert data["hardware"] is None and data["pcs"] is None and data["source"] is None


def test_analysis_section_matches_analysis_module(tmp_path):
    from host_decode.analysis.launch import sm_table
    from host_decode.analysis.regions import analyze
    from host_decode.reports.html import build_report_data

    path = save_capture(tmp_path / "c.npy", synthetic_buffer(), NAMES)
    trace = load_capture(path)
    data = build_report_data(trace)
    ref = analyze(trace)
    assert data["analysis"]["bubbles"]["bubble_ns_total"] == ref["bubbles"]["bubble_ns_total"]
    assert [o["group_a"] for o in data["analysis"]["overlap"]] == ["compute"]
    assert data["analysis"]["overlap"][0]["a_overlapped"] == pytest.approx(ref["overlap"][0]["a_overlapped"])
    sms, launch = sm_table(trace)
    assert [r["sm"] for r in data["sm"]] == sms["sm"].tolist()
    assert [r["busy_ns"] for r in data["sm"]] == sms["busy_ns"].tolist()
    assert data["kernel"]["launch_ns"] == launch["launch_ns"]


def test_blob_is_strict_json_and_survives_hostile_text(tmp_path):
    from host_decode.reports.html import _BLOB_RE, build_report_data, extract_data, render_html

    names = Names(events={1: "outer</script><b>x", 2: "body", 3: "slow", 4: "inner", 5: "load\u2028"}, groups=GROUPS)
    path = save_capture(tmp_path / "c.npy", synthetic_buffer(num_blocks=1), names)  # 1 block: cv 0, NaN overlaps
    trace = load_capture(path)
    src = 'x = 1\ns = "</script><script>alert(1)</script>"\n'
    data = build_report_data(trace, source_text=src, source_path="k.py")
    page = render_html(data)
    assert page.count("</script>") == 2  # the data element and the inline script: nothing from the data
    assert "<!--" not in page
    blob = _BLOB_RE.search(page).group(1)
    back = strict_loads(blob)
    assert back == extract_data(page) == json.loads(json.dumps(data))
    assert back["source"]["lines"][1] == 's = "</script><script>alert(1)</script>"'
    assert any(r["region"] == "outer</script><b>x" for r in back["regions"])


# --------------------------------------------------------------------------------------- map, hardware, source


def test_hardware_data_matches_join(inputs):
    from host_decode.hardware.adapters.ncu import read_ncu_csv
    from host_decode.hardware.join import join

    trace, _, data = full_report(inputs)
    table = read_ncu_csv(str(inputs["csv"]))
    ref = join(inputs["region_map"], table).renamed(trace.names.events)
    hw = data["hardware"]
    assert hw["check"]["ok"], hw["check"]
    assert hw["totals"]["samples"] == pytest.approx(table.total_samples)
    assert hw["moved_samples"] == pytest.approx(ref.moved_samples) and ref.moved_samples >= 40
    by_path = {r["path"]: r for r in hw["exclusive"]}
    for i, path in enumerate(ref.paths):
        assert by_path[path]["samples"] == pytest.approx(ref.columns["samples"][i])
        assert by_path[path]["inst_executed"] == pytest.approx(ref.columns["inst_executed"][i])
    # per-PC table: raw columns are the CSV's, attributed samples add up to the join's per-path sums
    pcs = data["pcs"]
    assert pcs["pc"] == inputs["region_map"].pc.tolist()
    assert sum(pcs["metrics"]["samples"]) == pytest.approx(table.total_samples)
    attributed = np.array(pcs["metrics"]["samples_attributed"], float)
    paths = np.array(pcs["path"])
    for row in data["paths"]:
        assert attributed[paths == row["index"]].sum() == pytest.approx(by_path[row["path"]]["samples"])
    # every stall column is the CSV's
    for reason in STALLS:
        if reason in pcs["stalls"]:
            assert sum(pcs["stalls"][reason]) == pytest.approx(table.stalls[reason].sum())
    # SASS text from the cubin listing, not just opcodes
    assert all(t.startswith((op.split(".")[0], "@")) for t, op in zip(pcs["text"], pcs["opcode"]))
    assert any(" " in t for t in pcs["text"])


def test_trace_regions_get_top_stall(inputs):
    _, _, data = full_report(inputs)
    body = next(r for r in data["regions"] if r["region"] == "body")
    assert body["hw"]["paths"] == ["outer/body"]
    hw_row = next(r for r in data["hardware"]["inclusive"] if r["path"] == "outer/body")
    assert body["hw"]["samples"] == pytest.approx(hw_row["samples"])
    assert body["stands_out"]["kind"] == "stall"
    top = max(data["hardware"]["stall_reasons"], key=lambda s: hw_row.get(f"stall_{s}", 0))
    assert body["stands_out"]["reason"] == top
    load = next(r for r in data["regions"] if r["region"] == "load")  # not in the cubin: no hardware row
    assert "hw" not in load


def test_source_lines_coloured_from_map(inputs):
    _, _, data = full_report(inputs)
    src, pcs = data["source"], data["pcs"]
    assert src["origin"] == "map" and src["cost_metric"] == "samples_attributed"
    lines = SOURCE.read_text().splitlines()
    fma = next(i + 1 for i, t in enumerate(lines) if "acc = acc * 1.5f + in[i];" in t)
    body_path = next(p["index"] for p in data["paths"] if p["path"] == "outer/body")
    assert body_path in src["line_paths"][str(fma)]
    # line cost = attributed samples of the PCs on that line
    attributed = np.array(pcs["metrics"]["samples_attributed"], float)
    on_line = np.array(pcs["line"]) == fma
    assert src["line_cost"][str(fma)] == pytest.approx(attributed[on_line].sum())
    assert sum(src["line_cost"].values()) == pytest.approx(attributed[np.array(pcs["line"]) >= 1].sum())


def test_source_of_another_file_is_not_coloured_by_the_map(inputs, tmp_path):
    """Line numbers belong to files: a source that is not the one the listing names gets no map
    colours (only its marker calls), and the page says why."""
    _, _, data = full_report(inputs, source_path=str(tmp_path / "other.cu"))
    src = data["source"]
    assert src["origin"] == "markers" and "line_paths" not in src and "markers.cu" in src["file_note"]
    # the same file elsewhere on disk (a different checkout) still matches by its name
    _, _, data = full_report(inputs, source_path="/elsewhere/markers.cu")
    assert data["source"]["origin"] == "map" and data["source"]["line_paths"]


def test_map_without_hardware_says_so(inputs):
    _, _, data = full_report(inputs, pc_table=None)
    assert data["hardware"] is None and "hardware" in data["missing"] and "map" not in data["missing"]
    assert data["pcs"]["metrics"] == {} and len(data["pcs"]["pc"]) == inputs["region_map"].pc.size
    assert data["source"]["line_cost"] == {}


def test_mismatched_hardware_data_is_refused(inputs):
    from host_decode.core.errors import DecodeError
    from host_decode.hardware.adapters.ncu import read_ncu_csv

    text = inputs["csv"].read_text().splitlines()
    bad = "\n".join(text + [text[-1].replace(text[-1].split(",")[0], '"0x7f0000100000"')]) + "\n"
    table = read_ncu_csv(bad)
    with pytest.raises(DecodeError, match="does not match"):
        full_report(inputs, pc_table=table)
    _, _, data = full_report(inputs, pc_table=table, force_join=True)
    assert not data["hardware"]["check"]["ok"] and data["pcs"]["not_in_map"] == 1


def test_marker_lines_without_map():
    from host_decode.reports.html_source import marker_lines

    src = """@cute.kernel
def k(prof):
    x = 1
    with profile_region(prof, "outer"):
        a = 2
        with profile_region(prof, "inner", index=i):
            b = 3
        c = 4
    prof.begin("load")
    d = 5
    prof.end("load")
    e = 6
"""
    out = marker_lines(src.splitlines(), {1: "outer", 2: "inner", 3: "load"})
    ev = {int(k): v for k, v in out["line_events"].items()}
    assert ev[5] == [1] and ev[7] == [1, 2] and ev[8] == [1] and ev[10] == [3]
    assert 3 not in ev and 12 not in ev
    assert [c["line"] for c in out["marker_calls"]] == [4, 6, 9, 11]


# --------------------------------------------------------------------------------------- CLI


def test_cli_writes_full_report(inputs, tmp_path, capsys):
    from host_decode.cli import main
    from host_decode.reports.html import extract_data

    out = tmp_path / "r.html"
    rc = main(["report", str(inputs["capture"]), "--map", str(inputs["map"]), "--cubin", str(inputs["cubin"]),
               "--ncu", str(inputs["csv"]), "--source", str(inputs["source"]), "-o", str(out)])
    assert rc == 0 and "wrote" in capsys.readouterr().out
    data = extract_data(out.read_text())
    assert data["hardware"]["check"]["ok"] and data["missing"] == {}
    assert "text" in data["pcs"]
    # --cubin alone builds the map
    rc = main(["report", str(inputs["capture"]), "--cubin", str(inputs["cubin"]), "-o", str(out), "-f"])
    data = extract_data(out.read_text())
    assert rc == 0 and [p["path"] for p in data["paths"]][3:] == ["outer", "outer/body", "outer/slow", "outer/inner"]


def test_cli_bad_map_names_the_file(tmp_path, capsys):
    from host_decode.cli import main

    cap = save_capture(tmp_path / "c.npy", synthetic_buffer(num_blocks=2), NAMES)
    bad = tmp_path / "notamap.json"
    bad.write_text('{"format": "something-else"}')
    rc = main(["report", str(cap), "--map", str(bad), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    assert rc != 0 and "notamap.json" in err and "pc2region map" in err
    assert not (tmp_path / "r.html").exists()


# --------------------------------------------------------------------------------------- the committed real capture


@pytest.mark.skipif(not REAL_CAPTURE.exists(), reason="examples/basic/capture.npy not committed yet")
def test_real_capture_report(tmp_path):
    from host_decode.reports.html import build_report_data, extract_data, render_html

    trace = load_capture(REAL_CAPTURE)
    data = extract_data(render_html(build_report_data(trace, capture_path=str(REAL_CAPTURE))))
    _check_regions_against_stats(trace, data)
    assert data["loss"]["nonzero_slots"] == trace.loss.nonzero_slots
    assert all(math.isfinite(r["total_ns"]) for r in data["regions"])


@pytest.mark.skipif(not REAL_CAPTURE.exists(), reason="examples/basic/capture.npy not committed yet")
def test_real_capture_full_report_via_cli(tmp_path):
    """The real H200 capture with its kernel's map (committed, or compiled here) and source: every PC of
    a region is listed for it, and the source lines of region `compute` are coloured by that region."""
    from host_decode.cli import main
    from host_decode.reports.html import extract_data

    out = tmp_path / "real.html"
    assert main(["report", *real_cli_args(tmp_path), "-o", str(out)]) == 0
    data = extract_data(out.read_text())
    trace = load_capture(REAL_CAPTURE)
    _check_regions_against_stats(trace, data)
    assert data["kernel"]["meta"]["device"].startswith("NVIDIA")
    paths = {p["path"]: p for p in data["paths"]}
    assert {"tile", "tile/load", "tile/compute"} <= set(paths)
    assert not data["missing"].get("map") and data["source"]["origin"] == "map"
    compute = next(r for r in data["regions"] if r["region"] == "compute")
    src = data["source"]["lines"]
    fma = next(i + 1 for i, t in enumerate(src) if "acc = acc * 0.999 + v" in t)
    assert paths["tile/compute"]["index"] in data["source"]["line_paths"][str(fma)]
    assert compute["event"] in paths["tile/compute"]["stack"]
    # lines of inlined helpers (ikp_cute/recorders/) are not painted onto kernel.py
    if "files" in data["pcs"]:
        assert all(1 <= int(k) <= len(src) for k in data["source"]["line_paths"])
    if real_hw_set():  # real per-PC data: it matches its map and lands in the regions
        hw = data["hardware"]
        assert hw["check"]["ok"], hw["check"]
        assert compute["hw"]["samples"] > 0 and compute["stands_out"]["kind"] == "stall"
        by_path = {r["path"]: r for r in hw["exclusive"]}
        assert sum(r["samples"] for r in by_path.values()) == pytest.approx(hw["totals"]["samples"])


def test_without_analysis_module_the_page_says_so(tmp_path, monkeypatch):
    from host_decode.reports import html as report_html

    monkeypatch.setattr(report_html, "_analysis_module", lambda: None)
    trace = load_capture(save_capture(tmp_path / "c.npy", synthetic_buffer(num_blocks=2), NAMES))
    data = report_html.extract_data(report_html.render_html(report_html.build_report_data(trace)))
    assert data["analysis"] is None and data["sm"] == [] and "analysis" in data["missing"]
    assert data["kernel"]["launch_ns"] == trace.end_ns - trace.start_ns
    _check_regions_against_stats(trace, data)


def test_sampling_only_and_counts_only_data(inputs):
    _, _, data = full_report(inputs, pc_table=sampling_only_table(inputs["region_map"], inputs))
    m = data["pcs"]["metrics"]
    assert set(m) == {"samples", "samples_attributed"} and data["source"]["cost_metric"] == "samples_attributed"
    assert sum(m["samples_attributed"]) == pytest.approx(sum(m["samples"])) == data["hardware"]["totals"]["samples"]
    assert "inst_executed" not in data["hardware"]["totals"]
    _, _, data = full_report(inputs, pc_table=counts_only_table(inputs))
    assert set(data["pcs"]["metrics"]) == {"inst_executed"} and data["pcs"]["stalls"] == {}
    assert data["source"]["cost_metric"] == "inst_executed"
    body = next(r for r in data["regions"] if r["region"] == "body")
    assert body["stands_out"]["kind"] in ("tail", "imbalance")  # no stall data: the timeline decides
