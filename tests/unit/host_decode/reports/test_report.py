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
from pathlib import Path

import numpy as np
import pytest

from host_decode.analysis.stats import region_summary
from host_decode.core import wire
from host_decode.core.model import Names
from host_decode.load.capture import load_capture, save_capture

ROOT = Path(__file__).resolve().parents[1]
CUBIN = ROOT / "tests" / "kernels_pc2region" / "markers.sm_90a.cubin"
SOURCE = ROOT / "tests" / "kernels_pc2region" / "markers.cu"
REAL_CAPTURE = ROOT / "examples" / "basic" / "capture.npy"
EVENTS = {1: "outer", 2: "body", 3: "slow", 4: "inner", 5: "load"}
GROUPS = {0: "compute", 1: "loader"}
NAMES = Names(events=EVENTS, groups=GROUPS)
STALLS = ("long_sb", "wait", "math", "drain", "barrier")
B, E, INSTANT, F = (int(t) for t in wire.EventType)


# --------------------------------------------------------------------------------------- inputs


def synthetic_buffer(num_blocks: int = 16, num_sms: int = 4, seed: int = 7) -> np.ndarray:
    """markers.cu-shaped records: group 0 runs outer{body x4, [slow], inner}; group 1 runs load x2.
    Block 5's body is 6x slower (a long tail and an imbalanced block, on purpose)."""
    rng = np.random.default_rng(seed)
    num_groups, per_lane = 2, 32
    stride = num_blocks * num_groups
    buf = np.zeros(wire.buffer_slots(stride, per_lane), np.uint64)
    buf[0] = wire.pack_header(num_blocks, num_groups)
    for block in range(num_blocks):
        t0 = 1_000_000 + (block // num_sms) * 40_000 + int(rng.integers(0, 500))
        for group in range(num_groups):
            lane = block * num_groups + group
            recs: list[tuple[int, int, int]] = []
            t = t0 + 100 * group
            recs += [(t & 0xFFFF_FFFF, wire.ANCHOR_LO_EVENT_ID, INSTANT), (t >> 32, wire.ANCHOR_HI_EVENT_ID, INSTANT)]
            t += 300
            if group == 0:
                recs.append((t, 1, B))
                for _ in range(4):
                    t += 100
                    recs.append((t, 2, B))
                    t += int(rng.integers(900, 1100)) * (6 if block == 5 else 1)
                    recs.append((t, 2, E))
                if block % 4 == 0:
                    recs.append((t + 50, 3, B))
                    t += 5000
                    recs.append((t, 3, E))
                recs.append((t + 80, 4, B))
                t += 80 + int(rng.integers(400, 600))
                recs.append((t, 4, E))
                t += 40
                recs.append((t, 1, E))
            else:
                for _ in range(2):
                    recs.append((t, 5, B))
                    t += int(rng.integers(1500, 2500))
                    recs.append((t, 5, E))
                    t += 700
            recs.append((t + 200, block % num_sms, F))
            for k, (timer, ev, ty) in enumerate(recs):
                tag = wire.make_tag(lane, ev, ty)
                buf[wire.slot_index(lane, k, stride)] = wire.pack_record(timer & 0xFFFF_FFFF, tag)
    return buf


def synthetic_ncu_csv(region_map, kernel: str = "markers") -> str:
    """A source-page CSV over the map's PCs: deterministic counts, zero at unreachable PCs, drain samples
    on the PC after the first EXIT (the join moves them to the EXIT)."""
    import csv
    import io

    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(["Kernel Name", kernel])
    w.writerow(["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
               + [f"stall_{s}" for s in STALLS])
    unreachable = region_map.paths.index("<unreachable>")
    exits = [i for i, op in enumerate(region_map.opcode) if op.startswith("EXIT")]
    after_exit = exits[0] + 1 if exits else -1
    for i, (pc, op) in enumerate(zip(region_map.pc, region_map.opcode)):
        executed = 0 if region_map.region[i] == unreachable or i == after_exit else 64 * (1 + i % 5)
        stalls = [((i * 7 + 3 * k) % 11) * (executed > 0) for k in range(len(STALLS))]
        if i == after_exit:
            stalls = [0, 0, 0, 40, 0]
        w.writerow([hex(0x7F00_0000_0000 + int(pc)), op + " R0, R1 ;", sum(stalls), executed] + stalls)
    return out.getvalue()


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    """Paths and objects of the full synthetic report input set (map needs nvdisasm: skipped without)."""
    from host_decode.hardware import pc2region, sass

    try:
        sass.find_nvdisasm()
    except Exception as e:  # noqa: BLE001 - any failure to find it means: no map here
        pytest.skip(f"nvdisasm not available ({e}); pip install nvidia-cuda-nvdisasm")
    d = tmp_path_factory.mktemp("report")
    capture = save_capture(d / "capture.npy", synthetic_buffer(), NAMES,
                           kernel="markers", device="synthetic (test)", sm_count=4)
    cubin = pc2region.read_cubin(str(CUBIN))
    region_map = pc2region.build_map(cubin, names=NAMES)
    map_path = d / "map.json"
    region_map.save(str(map_path))
    csv_path = d / "sass.csv"
    csv_path.write_text(synthetic_ncu_csv(region_map))
    from host_decode.reports.html_hardware import read_sass_listing

    sass_text, pc_files = read_sass_listing(cubin, "markers")
    return {"dir": d, "capture": capture, "map": map_path, "cubin": CUBIN, "csv": csv_path, "source": SOURCE,
            "region_map": region_map, "sass_text": sass_text, "pc_files": pc_files}


def full_report(inputs, **overrides):
    from host_decode.hardware.adapters.ncu import read_ncu_csv
    from host_decode.reports.html import build_report_data, extract_data, render_html

    trace = load_capture(inputs["capture"])
    kwargs = {"region_map": inputs["region_map"], "pc_table": read_ncu_csv(str(inputs["csv"])),
              "source_text": SOURCE.read_text(), "source_path": str(SOURCE), "sass_text": inputs["sass_text"],
              "pc_files": inputs["pc_files"], "capture_path": str(inputs["capture"])}
    kwargs.update(overrides)
    page = render_html(build_report_data(trace, **kwargs))
    return trace, page, extract_data(page)


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

REAL_DIR = REAL_CAPTURE.parent


def compile_basic_map(tmp_dir: Path):
    """pc2region map + cubin of examples/basic/kernel.py compiled here on the CPU for sm_90a with the
    capture's own profiling spec (the sidecar's), line info on. Skips without CuTe DSL / nvdisasm."""
    import os

    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    cute = pytest.importorskip("cutlass.cute")
    from cutlass import Float32, Int32
    from cutlass.cute.runtime import make_fake_compact_tensor

    from examples.basic.kernel import THREADS, launch_tiles
    from host_decode.hardware import pc2region
    from ikp_cute import EventRegistry, ProfileSpec, fake_buffer
    from ikp_cute.testing import sass

    side = json.loads(REAL_CAPTURE.with_suffix(".json").read_text())
    events = {name: int(i) for i, name in side["events"].items()}
    spec = ProfileSpec(mode=side.get("mode", "cursor"), num_groups=side["num_groups"], num_blocks=side["num_blocks"],
                       write_stride=side["write_stride"], records_per_lane=side["records_per_lane"],
                       fence=side.get("fence", "none"), events=EventRegistry(events))
    blocks, tiles = side["num_blocks"], 12
    x = make_fake_compact_tensor(Float32, (blocks * tiles * THREADS,))
    y = make_fake_compact_tensor(Float32, (blocks * THREADS,))
    compiled = cute.compile(launch_tiles, x, y, Int32(tiles), fake_buffer(spec), spec, blocks,
                            options=sass.keep_options("--generate-line-info"))
    cubin = tmp_dir / "kernel.cubin"
    cubin.write_bytes(bytes(compiled.__cubin__))
    region_map = pc2region.map_compiled(compiled, names={"events": side["events"]})
    return region_map, cubin


PC_FIXTURES = ROOT / "tests" / "fixtures" / "pc"


def real_hw_set() -> dict[str, Path] | None:
    """Real per-PC data of examples/basic/kernel.py from the GPU machine (gpu/pc_profile.py writes
    tiles_real_{ncu,cupti}.{csv|json, map.json, cubin} [+ .capture.npy]), ncu preferred; None if absent."""
    for name, data in (("ncu", "tiles_real_ncu.csv"), ("cupti", "tiles_real_cupti.json.gz")):
        files = {"data": PC_FIXTURES / data, "map": PC_FIXTURES / f"tiles_real_{name}.map.json",
                 "cubin": PC_FIXTURES / f"tiles_real_{name}.cubin",
                 "capture": PC_FIXTURES / f"tiles_real_{name}.capture.npy"}
        if files["data"].exists() and files["map"].exists():
            return {"kind": name, **files}
    return None


def real_cli_args(tmp_dir: Path) -> list[str]:
    """`ikp report` arguments for the committed real capture of examples/basic with the most real data
    there is: per-PC data + map + cubin of that kernel from the GPU machine (tests/fixtures/pc) when
    committed, else a map compiled here from the same source; kernel.py as the source."""
    hw = real_hw_set()
    capture = hw["capture"] if hw and hw["capture"].exists() else REAL_CAPTURE
    args = [str(capture)]
    if hw:
        args += ["--map", str(hw["map"]), f"--{hw['kind']}", str(hw["data"])]
        if hw["cubin"].exists():
            args += ["--cubin", str(hw["cubin"])]
    else:
        _, cubin = compile_basic_map(tmp_dir)
        args += ["--cubin", str(cubin)]
    if (REAL_DIR / "kernel.py").exists():
        args += ["--source", str(REAL_DIR / "kernel.py")]
    return args


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


def sampling_only_table(region_map, inputs):
    """CUPTI-like per-PC data: stall samples per reason, no execution counts."""
    from host_decode.hardware.adapters import PcTable
    from host_decode.hardware.adapters.ncu import read_ncu_csv

    ncu = read_ncu_csv(str(inputs["csv"]))
    return PcTable("cupti", "markers", ncu.pc, {}, dict(ncu.stalls))


def counts_only_table(inputs):
    """NVBit-like per-PC data: execution counts only."""
    from host_decode.hardware.adapters import PcTable
    from host_decode.hardware.adapters.ncu import read_ncu_csv

    ncu = read_ncu_csv(str(inputs["csv"]))
    return PcTable("nvbit", "markers", ncu.pc, {"inst_executed": ncu.counters["inst_executed"]}, {})


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
