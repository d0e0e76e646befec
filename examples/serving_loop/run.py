"""A serving-like loop: a few attention layers (FA4 + torch, random weights) run 1,000 steps; only steps
500-509 record, beside a torch.profiler trace of the same steps (needs an sm_90 GPU).

    python examples/serving_loop/run.py --out DIR
    ikp stats DIR/captures                                         # all recorded launches, one session
    ikp merge DIR/captures --torch DIR/torch_trace.json.gz --kernel flash -o merged.json.gz

What a user of a serving stack does (ikp_cute/ring.py):
1. build the session once with ``ProfileSpec(window_slots=R)`` (R >= launches to keep) and let FA4's
   host API build the instrumented kernel (examples/fa4_sm90: buffer address baked in);
2. run the loop as usual; around the steps of interest, ``with session.record_while():`` (device ops on
   the stream: the window opens and closes exactly at those steps' launches, no sync) and, if wanted,
   ``torch.profiler.profile`` over the same steps;
3. afterwards ``session.ring.save(DIR)``: one capture per recorded launch, launch indices in the sidecars;
   the launches outside the window cost one predicated load of the window words per role and one
   fire-and-forget add per block (per warp while a window is set but not on this launch).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE.parent / "fa4_sm90"))

SHAPE = {"batch": 1, "seqlen": 256, "heads": 4, "dim": 128, "layers": 2}
DETAIL = "iter"


def build_layers(layers, hidden, seed=0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    scale = hidden ** -0.5
    return [
        (torch.randn(hidden, 3 * hidden, device="cuda", dtype=torch.bfloat16, generator=g) * scale,
         torch.randn(hidden, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * scale)
        for _ in range(layers)
    ]


def step(x, layers, attention, batch, seqlen, heads, dim):
    """One forward step: per layer qkv projection, FA4 causal attention, output projection, residual."""
    import torch

    for w_qkv, w_o in layers:
        qkv = (x @ w_qkv).view(batch, seqlen, 3, heads, dim)
        o = attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
        x = torch.nn.functional.layer_norm(x + o.reshape(batch, seqlen, heads * dim) @ w_o, (heads * dim,))
    return x


def run(out: Path, steps=1000, record=(500, 510), **shape) -> dict:
    import fa4_instrumented as fi
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from examples.fa4_sm90.run import fa4_forward, make_session

    shape = {**SHAPE, **shape}
    batch, seqlen, heads, dim, layers_n = (shape[k] for k in ("batch", "seqlen", "heads", "dim", "layers"))
    hidden = heads * dim
    window_launches = (record[1] - record[0]) * layers_n
    session = make_session(fi, batch, seqlen, heads, DETAIL, window_slots=window_launches)
    layers = build_layers(layers_n, hidden)

    def attention(q, k, v):
        with fi.patched_interface(session.spec, DETAIL):
            return fa4_forward(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)

    x0 = torch.randn(batch, seqlen, hidden, device="cuda", dtype=torch.bfloat16)
    step(x0, layers, attention, batch, seqlen, heads, dim)  # compile outside the loop (launch 0.. are counted)
    torch.cuda.synchronize()
    first = session.ring.state()["epoch"]
    session.ring.arm()
    x = x0
    prof = None
    t0 = time.perf_counter()
    for i in range(steps):
        if i == record[0]:
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            prof.__enter__()
        if record[0] <= i < record[1]:
            with session.record_while(), record_function(f"step {i}"):
                x = step(x, layers, attention, batch, seqlen, heads, dim)
        else:
            x = step(x, layers, attention, batch, seqlen, heads, dim)
        if i == record[1] - 1:
            torch.cuda.synchronize()
            prof.__exit__(None, None, None)
    torch.cuda.synchronize()
    loop_s = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    captures = out / "captures"
    if captures.exists():
        shutil.rmtree(captures)
    paths = session.ring.save(captures)
    raw = out / "torch_trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(out / "torch_trace.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    state = session.ring.state()
    traces = session.ring.decode()
    expected = list(range(first + record[0] * layers_n, first + record[1] * layers_n))
    result = {
        "steps": steps, "recorded_steps": list(record), "layers": layers_n, "shape": shape,
        "loop_s": round(loop_s, 3), "launches_seen": state["epoch"], "slot_launches": state["slot_launches"],
        "expected": expected, "lost_launches": state["lost_launches"],
        "records_lost": [int(t.loss.lost) for t in traces], "spans": [int(t.spans.size) for t in traces],
        "files": len(paths), "finite": bool(torch.isfinite(x).all()),
    }
    result["ok"] = (state["slot_launches"] == expected and not any(result["records_lost"])
                    and state["lost_launches"] == 0 and result["finite"])
    (out / "result.json").write_text(json.dumps(result, indent=1))
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="serving_loop_out")
    p.add_argument("--steps", type=int, default=1000)
    args = p.parse_args(argv)
    import ikp_cute

    ikp_cute.require_gpu('examples/serving_loop/run.py')  # one line where there is no GPU
    result = run(Path(args.out), steps=args.steps)
    print(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
