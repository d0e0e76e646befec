"""The inputs of the `ikp report` tests: a synthetic capture shaped like tests/kernels_pc2region/markers.cu, the
real pc2region map of that kernel's committed cubin, a synthetic Nsight Compute source-page CSV over the
map's PCs (the `inputs` fixture), and the `ikp report` arguments for the committed real capture of
examples/basic.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from host_decode.core import wire
from host_decode.core.model import Names
from host_decode.load.capture import load_capture, save_capture

ROOT = Path(__file__).resolve().parents[2]
CUBIN = ROOT / "tests" / "kernels_pc2region" / "markers.sm_90a.cubin"
SOURCE = ROOT / "tests" / "kernels_pc2region" / "markers.cu"
REAL_CAPTURE = ROOT / "examples" / "basic" / "capture.npy"
EVENTS = {1: "outer", 2: "body", 3: "slow", 4: "inner", 5: "load"}
GROUPS = {0: "compute", 1: "loader"}
NAMES = Names(events=EVENTS, groups=GROUPS)
STALLS = ("long_sb", "wait", "math", "drain", "barrier")
B, E, INSTANT, F = (int(t) for t in wire.EventType)


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


def report_inputs(tmp_path_factory) -> dict:
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
