"""The flag examples' --trace mode on the CPU: the runners' traced compiles (CPU tensors in place of the GPU's, a CPU
Session: no kernel edit, both waits, the default level and flags only) and what they report of a capture (their
`traced_story`, read through host_decode: analysis.flag_paths, sessions.concat) on hand-built buffers whose
matching and critical path are worked out by hand."""

from __future__ import annotations

import os
import re
import types

import numpy as np
import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from host_decode.core import wire  # noqa: E402
from host_decode.core.decoder import decode  # noqa: E402
from tests.support.flag_examples import deps_run, dist_run  # noqa: E402  (puts the examples on sys.path)

B, E, INST = (int(t) for t in (wire.EventType.BEGIN, wire.EventType.END, wire.EventType.INSTANT))
ADDR, VALUE = wire.FLAG_ADDR_EVENT_ID, wire.FLAG_VALUE_EVENT_ID
T0 = 1 << 40
BASE = 0x7F00_0010_0000  # `ready`: 2 int32 counters
SIGNAL_ID, WAIT_ID = 3, 4
FLAGS = [{"id": SIGNAL_ID, "kind": "signal", "op": "red_add1", "site": "megakernel_deps.py:75", "order": "release",
          "scope": "gpu", "update": "add", "value": 1},
         {"id": WAIT_ID, "kind": "wait", "op": "spin_lock_ld_lt_relaxed_wait", "site": "megakernel_deps.py:106",
          "order": "relaxed", "scope": "gpu", "cmp": "ge", "expected": 2}]
BUFFERS = [{"name": "ready", "owner_rank": 0, "base": BASE, "bytes": 8, "elem_bytes": 4}]


def addr(counter: int) -> int:
    return ((BASE + 4 * counter) >> wire.FLAG_ADDR_SHIFT) & 0xFFFF_FFFF


def capture(lanes: dict[int, list], blocks=2, warps=8, records_per_lane=16, t0=T0) -> np.ndarray:
    """A v1 buffer of the tracer's lanes (block * warps + warp) holding the given records after their anchors
    (times relative to `t0`; payloads carry their own values)."""
    n = blocks * warps
    buf = np.zeros(wire.buffer_slots(n, records_per_lane), np.uint64)
    buf[0] = wire.pack_header(blocks, warps)
    for lane, records in lanes.items():
        rows = [((t0 + 100) & 0xFFFF_FFFF, wire.ANCHOR_LO_EVENT_ID, INST), ((t0 + 100) >> 32, wire.ANCHOR_HI_EVENT_ID,
                                                                          INST)] + records
        for k, (timer, event, etype) in enumerate(rows):
            timed = etype != INST or event not in (*wire.PAYLOAD_IDS, wire.ANCHOR_LO_EVENT_ID, wire.ANCHOR_HI_EVENT_ID)
            buf[wire.slot_index(lane, k, n)] = wire.pack_record((t0 + timer if timed else timer) & 0xFFFF_FFFF,
                                                                wire.make_tag(lane, event, etype))
    return buf


def signal(t, counter, amount=None, address=addr):
    out = [(t, SIGNAL_ID, INST), (address(counter), ADDR, INST)]
    return out + ([(amount, VALUE, INST)] if amount is not None else [])


def wait(begin, end, counter, address=addr, value=None):
    out = [(begin, WAIT_ID, B), (end, WAIT_ID, E), (address(counter), ADDR, INST)]
    return out + ([(value, VALUE, INST)] if value is not None else [])


def test_a_traced_capture_becomes_the_flag_table_and_its_path():
    """Block 1's first signal on ready[0] comes late (1100): block 0's wait on ready[0] >= 2 blocks until then;
    block 1's own wait finds the counter complete. Warp 8 (block 1, warp 0) adds 3 at once on ready[1]. Block 0
    ends last (its warp 1, 1400): the path runs back through its wait to block 1's late signal."""
    lanes = {0: signal(200, 0) + signal(320, 1) + wait(345, 1120, 0), 1: [(1400, 9, INST)],  # block 0 ends last
             8: signal(1100, 0) + signal(1220, 1, amount=3) + wait(1242, 1250, 0)}
    trace = decode(capture(lanes), meta={"flags": FLAGS, "flag_buffers": BUFFERS})
    assert trace.loss.lost == 0 and trace.payloads.size == 7
    story = deps_run.traced_story(trace, 0)
    assert story["events"] == 8 and story["problems"] == {} and story["unknown_addresses"] == 0
    assert story["match"]["matched"] == 2 and story["waits_blocked"] == 1
    assert story["longest_wait_ns"] == 1120 - 345 and story["longest_wait_released_by_block"] == 1
    assert story["releaser_on_path"]
    assert any("released by rank 0 block 1" in line for line in story["path"])
    assert story["path_ns"] == 1400 - 100  # from block 1's start (its anchors) to block 0's end


def test_an_address_in_no_buffer_is_counted_and_named_by_its_address():
    lanes = {0: signal(200, 0) + signal(320, 7)}  # counter 7 lies past `ready`
    story = deps_run.traced_story(decode(capture(lanes), meta={"flags": FLAGS, "flag_buffers": BUFFERS}), 0)
    assert story["unknown_addresses"] == 1 and story["events"] == 2


AG_FLAGS = [dict(FLAGS[0], site="ag_gemm.py:93", scope="sys"),
            dict(FLAGS[1], site="ag_gemm.py:120", scope="sys", expected="recorded")]


def test_the_distributed_story_of_simulated_ranks():
    """Two ranks simulated in one grid (one block each): rank 0 (block 0) signals rank 1's flags[0, 0] late
    (900); rank 1's wait on it blocks from 300 and ends at 1000. The delayed rank's rows are the ones waited for."""
    base = {0: 0x7F00_0000_0000, 1: 0x7F00_0010_0000}  # each simulated rank's `flags` (1 x 2 int32)
    buffers = [{"name": "flags", "owner_rank": r, "base": b, "bytes": 8, "elem_bytes": 4} for r, b in base.items()]
    to = lambda r: lambda c: ((base[r] + 4 * c) >> wire.FLAG_ADDR_SHIFT) & 0xFFFF_FFFF  # noqa: E731
    lanes = {0: signal(900, 0, address=to(1)), 8: wait(300, 1000, 0, address=to(1), value=1) + [(1050, 9, INST)]}
    meta = {"flags": AG_FLAGS, "flag_buffers": buffers, "example": {"row_blocks": 2}}
    story = dist_run.traced_story([decode(capture(lanes), meta=meta)], 1, 0, 0, simulated=True)
    assert story["match"]["matched"] == 1 and story["waits_blocked"] == 1 and story["clock_error_ns"] == 32
    assert story["wait_ns_median_on_delayed_rank"] == 700 and story["wait_ns_median_other"] is None
    assert any("rank 1 block 0 waited on flags@rank1[0], released by rank 0 block 0" in line
               for line in story["path"]), story["path"]


def test_the_distributed_story_of_two_rank_captures_on_the_host_clock():
    """The same step as two captures, one per rank, each on its own clock: rank 1's %globaltimer runs 5 us behind
    rank 0's. Merged on the host clock by their sidecars' offsets, the signal (900 on rank 0's clock) precedes the
    end of the wait it released (1000 on the host clock, 1000 - 5000 on rank 1's)."""
    bases = [[0x7F00_0000_0000, 0x7F00_0010_0000], [0x7F11_0000_0000, 0x7F11_0010_0000]]  # [viewer][owner]
    in_rank1 = [lambda c, v=v: ((bases[v][1] + 4 * c) >> 2) & 0xFFFF_FFFF for v in (0, 1)]  # rank 1's copy, seen by v
    traces = []
    for r, lanes, t0, offset in ((0, {0: signal(900, 0, address=in_rank1[0])}, T0, 0),
                                 (1, {0: wait(300, 1000, 0, address=in_rank1[1], value=1) + [(1050, 9, INST)]},
                                  T0 - 5000, 5000)):
        buffers = [{"name": "flags", "owner_rank": o, "base": bases[r][o], "bytes": 8, "elem_bytes": 4} for o in (0, 1)]
        meta = {"flags": AG_FLAGS, "flag_buffers": buffers, "example": {"row_blocks": 2}, "rank": r,
                "clock_offset_ns": offset, "clock_error_ns": 40, "clock_reference": "host CLOCK_REALTIME of test"}
        traces.append(decode(capture(lanes, blocks=1, t0=t0), meta=meta))
    story = dist_run.traced_story(traces, 1, 0, 0, simulated=False)
    assert story["match"]["matched"] == 1 and story["clock_error_ns"] == 32 + 40 + 40
    assert story["wait_ns_median_on_delayed_rank"] == 700
    assert any("rank 1 block 0 waited on flags@rank1[0], released by rank 0 block 0" in line
               for line in story["path"]), story["path"]


def _torch():
    return pytest.importorskip("torch")


def test_the_runners_traced_compiles_on_cpu():
    """compile_traced of both runners on CPU tensors of their real shapes: four traced variants each (two waits,
    the default level and flags only), their flag sites named by the library function, and the audit line."""
    pytest.importorskip("cutlass")
    torch = _torch()
    import ag_gemm as ag
    import megakernel_deps as mk

    import ikp_cute.flags
    from ikp_cute.pipelines.audit import summary

    ikp_cute.flags.clear()
    m, k, n = 256, 128, 128
    tasks = deps_run.task_table(m // 64, n // 64, n // 64)
    z = dict(dtype=torch.float32)
    deps = types.SimpleNamespace(
        tasks=torch.from_numpy(tasks), queue=torch.zeros(1, dtype=torch.int32),
        ready=torch.zeros(m // 64, dtype=torch.int32), X=torch.zeros(m, k, **z), W1=torch.zeros(k, n, **z),
        Y=torch.zeros(m, n, **z), W2=torch.zeros(n, n, **z), Z=torch.zeros(m, n, **z),
        log=torch.zeros(tasks.shape[0], 6, dtype=torch.int64), no_log=torch.zeros(1, 6, dtype=torch.int64))
    traced = deps_run.compile_traced(mk, deps, 132, 64, device="cpu")
    assert set(traced) == {(wk, mode) for wk in ("ld", "cas") for mode in ("traced", "flags only", "no named barriers")}
    for (wk, mode), (trace, _, run) in traced.items():
        meta = trace.metadata()
        assert callable(run) and [f["op"] for f in meta["flags"]] == [
            "red_add1", {"ld": "spin_lock_ld_lt_relaxed_wait", "cas": "spin_lock_atom_cas_acquire_wait"}[wk]]
        line = summary(meta)[0]
        assert line.endswith("2 of 2 flag sites traced"), line
        if mode != "traced":
            assert "barrier sites traced (" in line  # the CTA barriers: not recorded with flags only or without them
    assert [b["name"] for b in ikp_cute.flags.registered()] == ["ready"]

    world, ms = 2, m // 2
    dtasks = np.stack([dist_run.task_table(r, world, ms // 64, n // 64, 2) for r in range(world)])
    dist = dist_run.Problem.__new__(dist_run.Problem)
    dist.__dict__.update(
        tasks=torch.from_numpy(dtasks), queue=torch.zeros(world, dtype=torch.int32), shards=torch.zeros(m, k, **z),
        B=torch.zeros(k, world * n, **z), C=torch.zeros(m, world * n, **z),
        a_ptrs=torch.zeros(world, dtype=torch.int64), flag_ptrs=torch.zeros(world, dtype=torch.int64),
        log=torch.zeros(world, dtasks.shape[1], 6, dtype=torch.int64), no_log=torch.zeros(1, 1, 6, dtype=torch.int64),
        rank_base=0, world=world, ranks_here=world, chunks=2, epoch=0, row_blocks=ms // 64,
        a_full=[torch.zeros(m, k, **z) for _ in range(world)],
        flags=[torch.zeros(world, ms // 64, dtype=torch.int32) for _ in range(world)])
    traced = dist_run.compile_traced(ag, dist, 66, 64, device="cpu")
    for (wk, _), (trace, _, _) in traced.items():
        signal_site, wait_site = trace.metadata()["flags"]
        assert signal_site["scope"] == wait_site["scope"] == "sys" and wait_site["expected"] == "recorded"
    names = [(b["name"], b["owner_rank"]) for b in ikp_cute.flags.registered()]
    assert names == [("ready", 0), ("a_full", 0), ("flags", 0), ("a_full", 1), ("flags", 1)]
    ikp_cute.flags.clear()


# --- the traced kernels keep the plain kernels' flag semantics (PTX) ------------------------------------------

PROBE = re.compile(r"^\s*((?:ld|atom)\.[\w.]*(?:relaxed|acquire)\.[\w.]+)\s+(%r\d+)(?:\|[^,]*)?,\s*\[(%rd\d+)\]",
                   re.MULTILINE)
FLAG_OPS = re.compile(r"^\s*((?:red|atom|ld|st|fence)\.[\w.]*(?:relaxed|acquire|release|acq_rel|sc)[\w.]*)",
                      re.MULTILINE)


def kernel_lines(ptx: str) -> list[str]:
    """The kernel's own instructions: no debug lines, comments or inline blocks of ours (/* ikp */, `{ .reg`)."""
    out = []
    for line in ptx[ptx.index(".entry"):].splitlines():
        s = line.strip()
        if not s or s.startswith(("//", ".loc", ".file")) or "/* ikp" in s or s.startswith("{ .reg"):
            continue
        out.append(s)
    return out


def spin_loops(ptx: str) -> list[tuple[str, ...]]:
    """Every loop of the kernel that re-probes a flag (a label, an ld/atom with a memory order, then the branch
    back to the label), registers renamed: the probe, the compare and the branch, as the hardware spins."""
    lines, loops = kernel_lines(ptx), []
    for i, line in enumerate(lines):
        if not re.match(r"^\$L__BB\d+_\d+:$", line):
            continue
        label = line[:-1]
        for j in range(i + 1, min(i + 8, len(lines))):
            if re.search(rf"bra(?:\.uni)?\s+{re.escape(label)};", lines[j]):
                body = lines[i + 1:j + 1]
                if any(PROBE.match(b) for b in body):
                    loops.append(tuple(re.sub(r"%(r|rd|p)\d+", r"%\1", b).replace(label, "LOOP") for b in body))
                break
    return loops


def flag_ops(ptx: str) -> list[str]:
    """The kernel's ordered memory operations with a memory order (probes, reds, fences), in program order."""
    return FLAG_OPS.findall("\n".join(kernel_lines(ptx)))


@pytest.mark.parametrize("example", ["megakernel_deps", "distributed"])
@pytest.mark.parametrize("wait_kind", ["ld", "cas"])
def test_traced_kernels_keep_the_plain_flag_semantics(example, wait_kind):
    """Traced (default level, and flags only), each example's kernel makes the plain kernel's flag operations
    with the same kind, order and scope, in the same order (the wait's first probe peeled: one more probe, the same
    instruction on the same address), and every spin loop of the plain kernel is there unchanged (probe, compare
    against the expected value, branch back): a traced wait still spins until its condition holds, and the
    signal is still the one `red` with release order."""
    pytest.importorskip("cutlass")
    from ikp_cute.pipelines import session_for, trace_pipelines
    from tests.support.flag_examples import compile_deps, compile_dist

    compile_example = {"megakernel_deps": compile_deps, "distributed": compile_dist}[example]
    plain = compile_example(wait_kind, False)
    assert len(spin_loops(plain)) == 1
    for ops in (None, {"flag_signal", "flag_wait"}):
        with trace_pipelines(session_for(132, 8, 64, kernel=example, device="cpu"), ops=ops) as trace:
            traced = compile_example(wait_kind, False)
        assert [f["kind"] for f in trace.metadata()["flags"]] == ["signal", "wait"]
        assert spin_loops(traced) == spin_loops(plain)
        plain_ops, traced_ops = flag_ops(plain), flag_ops(traced)
        probe = FLAG_OPS.match(spin_loops(plain)[0][0]).group(1)
        k = traced_ops.index(probe)
        assert traced_ops[:k] + traced_ops[k + 1:] == plain_ops  # the peeled first probe is the one extra op
        assert traced_ops[k + 1] == probe  # the loop's own probe follows it
        peeled, looped = [m for m in PROBE.finditer("\n".join(kernel_lines(traced))) if m.group(1) == probe]
        assert peeled.group(3) == looped.group(3)  # the same flag address
        signal = [op for op in plain_ops if op.startswith("red.")]
        assert signal == [op for op in traced_ops if op.startswith("red.")] and signal[0].startswith("red.release.")
