"""Record launches of a captured CUDA graph: every replay advances the ring on the device (needs a GPU).

    python examples/cuda_graph/run.py --out DIR            # own kernel + FA4, window on replays 50-59
    python examples/cuda_graph/run.py --out DIR --own-only

What it does (ikp_cute/ring.py): the kernel is compiled once with ``ProfileSpec(window_slots=10)``; its
launch is captured into a ``torch.cuda.CUDAGraph``; ``session.window(start=50, count=10, relative=True)``
(device ops, no sync) selects replays 50-59 of 100. Nothing runs on the host between replays: each lane
of a launch reads the control block once, the last lane to finalize advances the launch counter and the
ring. Afterwards ``session.ring.save(DIR)`` writes one capture per recorded replay
(``launch_<index>.npy`` + sidecar with ``launch_index`` and the ring's counts) and ``ikp stats DIR``
reads them as one session.

Two kernels: examples/cuda_graph/kernel.py (our own CuTe DSL kernel, stream argument) and FA4's Hopper
forward through ``flash_attn.cute.interface.flash_attn_func`` (instrumented by the examples/fa4_sm90
subclass, buffer address baked in, so the graph needs nothing but the kernel).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE.parent / "fa4_sm90"))

REPLAYS, WINDOW_START, WINDOW_COUNT = 100, 50, 10


def _stream_arg():
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


def replay_in_window(session, launch, replays=REPLAYS, start=WINDOW_START, count=WINDOW_COUNT) -> dict:
    """Capture `launch()` in a CUDA graph, replay it `replays` times with the window on replays
    start..start+count-1; -> the ring state plus the launch index of replay 0."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the graph (compiles, loads the module): closed window
        launch()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    torch.cuda.synchronize()
    first = session.ring.state()["epoch"]  # capturing did not run the kernel: replay 0 is this launch
    session.ring.arm()
    session.window(start, count, relative=True)
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    state = session.ring.state()
    state["first_replay_launch"] = first
    state["expected"] = list(range(first + start, first + start + count))
    state["graph"] = graph  # keep it alive while the caller looks at outputs
    return state


def run_own(out: Path, blocks=16, tiles=8) -> dict:
    """Our own kernel (examples/cuda_graph/kernel.py) in a graph; checks every replay in the window."""
    import cutlass.cute as cute
    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from examples.cuda_graph.kernel import EVENTS, GROUPS, THREADS, launch_tiles

    x = torch.rand(blocks * tiles * THREADS, device="cuda")
    y = torch.zeros(blocks * THREADS, device="cuda")
    spec = ikp_cute.ProfileSpec(num_groups=2, num_blocks=blocks, records_per_lane=5 * tiles + 8, events=EVENTS,
                                window_slots=WINDOW_COUNT)
    session = ikp_cute.Session(spec, groups=GROUPS, kernel="tiles_kernel")
    args = (from_dlpack(x, assumed_align=16), from_dlpack(y, assumed_align=16), Int32(tiles), session.kernel_arg())
    compiled = cute.compile(launch_tiles, *args, session.spec, blocks, _stream_arg())

    def launch():
        compiled(*args, _stream_arg())

    state = replay_in_window(session, launch)
    paths = session.ring.save(out, force=True)  # this runner owns its output directory
    traces = session.ring.decode()
    spans_per_launch = blocks * 2 * tiles * 2  # (tile + load|compute) per tile per lane
    result = {
        "kernel": "tiles_kernel (own)",
        "slot_launches": state["slot_launches"],
        "expected": state["expected"],
        "lost_launches": state["lost_launches"],
        "launches_seen": state["epoch"],
        "spans": [int(t.spans.size) for t in traces],
        "spans_expected": spans_per_launch,
        "records_lost": [int(t.loss.lost) for t in traces],
        "files": [p.name for p in paths],
    }
    result["ok"] = (state["slot_launches"] == state["expected"] and all(s == spans_per_launch for s in result["spans"])
                    and not any(result["records_lost"]))
    return result


def run_fa4(out: Path, batch=1, seqlen=512, heads=4, dim=128, causal=True, detail="iter") -> dict:
    """FA4 through flash_attn_func, captured in a graph and replayed; output checked against FA4's own."""
    import fa4_instrumented as fi
    import torch

    from examples.fa4_sm90.run import fa4_forward, make_inputs, make_session

    q, k, v = make_inputs(batch, seqlen, heads, dim, seed=3)
    reference = fa4_forward(q, k, v, causal)
    session = make_session(fi, batch, seqlen, heads, detail, window_slots=WINDOW_COUNT)
    holder = {}

    def launch():
        with fi.patched_interface(session.spec, detail):
            holder["out"] = fa4_forward(q, k, v, causal)

    state = replay_in_window(session, launch)
    same = bool(torch.equal(holder["out"], reference))
    paths = session.ring.save(out, force=True)  # this runner owns its output directory
    traces = session.ring.decode()
    result = {
        "kernel": f"FA4 sm90 fwd [{detail}] b{batch} s{seqlen} h{heads} d{dim} {'causal' if causal else 'non-causal'}",
        "slot_launches": state["slot_launches"],
        "expected": state["expected"],
        "lost_launches": state["lost_launches"],
        "launches_seen": state["epoch"],
        "spans": [int(t.spans.size) for t in traces],
        "records_lost": [int(t.loss.lost) for t in traces],
        "lanes_with_finalize": [int((t.lanes["finalize_ns"] >= 0).sum()) for t in traces],
        "lanes": session.spec.num_lanes,
        "output_equals_fa4": same,
        "files": [p.name for p in paths],
    }
    result["ok"] = (state["slot_launches"] == state["expected"] and same and not any(result["records_lost"])
                    and len(set(result["spans"])) == 1 and set(result["lanes_with_finalize"]) == {result["lanes"]})
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="cuda_graph_out")
    p.add_argument("--own-only", action="store_true")
    args = p.parse_args(argv)
    import ikp_cute

    ikp_cute.require_gpu('examples/cuda_graph/run.py')  # one line where there is no GPU
    out = Path(args.out)
    results = {"own": run_own(out / "own")}
    if not args.own_only:
        results["fa4"] = run_fa4(out / "fa4")
    print(json.dumps(results, indent=1, default=str))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
