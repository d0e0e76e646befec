"""FA4 called from a ``torch.compile``d module, recording with ikp_cute (needs an sm_90 GPU for `run`).

    python examples/torch_compile/run.py

Nothing of the profiler runs on the host per launch: with ``ProfileSpec(window_slots=R)`` the kernel
decides on the device whether a launch records (ikp_cute/ring.py), so there is no buffer reset, no sync
and no Python in the compiled graph. What dynamo cannot trace is FA4's own host API (CuTe DSL compile
and TVM-FFI call): called directly it is a graph break, with or without the profiler. The way around it
is the ordinary one for an opaque kernel: a ``torch.library.custom_op`` (:func:`opaque`) with a fake
(shape) implementation; then ``torch.compile(fullgraph=True)`` holds and FA4 (instrumented through
examples/fa4_sm90's ``patched_interface``) runs inside the compiled module. Window control stays
outside the compiled region (``session.window(..., relative=True)``: device ops on the stream).

Checked on CPU by tests/unit/examples/test_torch_compile.py (the custom-op route compiles with fullgraph=True and no
graph break, a stand-in kernel) and on the GPU by gpu/capture_suite.py (FA4, window on calls 3-5).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE.parent / "fa4_sm90"))


def opaque(name: str, fn):
    """`fn(q, k, v) -> out` (same shape and dtype as q) as a torch custom op torch.compile does not trace."""
    import torch

    @torch.library.custom_op(name, mutates_args=(), schema="(Tensor q, Tensor k, Tensor v) -> Tensor")
    def op(q, k, v):
        return fn(q, k, v)

    @op.register_fake
    def _(q, k, v):
        return torch.empty_like(q)

    return op


def graph_breaks(module, *inputs) -> int:
    """Graph breaks dynamo reports when compiling module(*inputs) (torch._dynamo.explain)."""
    import torch

    torch._dynamo.reset()
    return int(torch._dynamo.explain(module)(*inputs).graph_break_count)


def run(calls=8, window=(3, 3), batch=1, seqlen=512, heads=4, dim=128, detail="iter") -> dict:
    import fa4_instrumented as fi
    import torch

    from examples.fa4_sm90.run import fa4_forward, make_inputs, make_session

    session = make_session(fi, batch, seqlen, heads, detail, window_slots=window[1])

    def fa4_recorded(q, k, v):
        with fi.patched_interface(session.spec, detail):
            return fa4_forward(q, k, v, causal=True)

    fa4_op = opaque("ikp_examples::fa4_fwd", fa4_recorded)

    class Block(torch.nn.Module):
        def __init__(self, attention):
            super().__init__()
            self.attention = attention

        def forward(self, q, k, v):
            return torch.relu(self.attention(q * 1.0, k, v)) + 1.0

    q, k, v = make_inputs(batch, seqlen, heads, dim, seed=5)
    try:  # FA4's host API traced by dynamo: a graph break (or an error), with or without the profiler
        direct_breaks = graph_breaks(Block(lambda q, k, v: fa4_forward(q, k, v, causal=True)), q, k, v)
    except Exception as e:
        direct_breaks = f"dynamo error: {type(e).__name__}: {str(e)[:200]}"
    op_breaks = graph_breaks(Block(fa4_op), q, k, v)
    torch._dynamo.reset()
    compiled = torch.compile(Block(fa4_op), fullgraph=True)
    reference = torch.relu(fa4_forward(q, k, v, causal=True)) + 1.0
    out = compiled(q, k, v)  # compiles; one launch with the window closed
    torch.cuda.synchronize()
    first = session.ring.state()["epoch"]
    session.ring.arm()
    session.window(window[0], window[1], relative=True)
    for _ in range(calls):
        out = compiled(q, k, v)
    torch.cuda.synchronize()
    state = session.ring.state()
    traces = session.ring.decode()
    expected = list(range(first + window[0], first + window[0] + window[1]))
    result = {
        "graph_breaks_fa4_direct": direct_breaks, "graph_breaks_custom_op": op_breaks,
        "slot_launches": state["slot_launches"], "expected": expected,
        "records_lost": [int(t.loss.lost) for t in traces], "spans": [int(t.spans.size) for t in traces],
        "output_equals_eager": bool(torch.equal(out, reference)),
    }
    result["ok"] = (op_breaks == 0 and state["slot_launches"] == expected and not any(result["records_lost"])
                    and result["output_equals_eager"])
    return result


if __name__ == "__main__":
    import json

    import ikp_cute

    ikp_cute.require_gpu("examples/torch_compile/run.py")  # one line where there is no GPU
    r = run()
    print(json.dumps(r, indent=1))
    raise SystemExit(0 if r["ok"] else 1)
