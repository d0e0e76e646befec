"""Flags traced with no kernel edit, compiled on the CPU for sm_90a (docs/flags.md; ikp_cute/pipelines/flag_ops.py,
flag_trace.py, record.py's record_with_payload; ikp_cute/flags.py):

* ikp_cute.flags.signal / wait outside a trace compile to the PTX of the hand-written code; inside, the records;
* the four primitives of cutlass.utils.distributed, hooked: the same memory operations (kind, order, scope), no
  multimem, records per call site, one `flags` entry and event id each; a wait that passed runs one timer read
  and its compare before the branch to the blocked path; nothing patched after the context;
* the audit lists flag sites: a raw release red traced by the IR pass, a hand-written spin loop untraced with
  its reason; `ops=` leaves flags out by choice.
"""

from __future__ import annotations

import collections
import os
import re

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
pytest.importorskip("cutlass")

from host_decode.core import wire  # noqa: E402

BAKED = 0x7F0012340000
FLAG_ADDR_TAG = (wire.FLAG_ADDR_EVENT_ID << 2) | int(wire.EventType.INSTANT)
FLAG_VALUE_TAG = (wire.FLAG_VALUE_EVENT_ID << 2) | int(wire.EventType.INSTANT)
FLAG_OP = re.compile(r"^\s*((?:red|atom|ld|st|fence|multimem)\.[\w.:]+)", re.MULTILINE)
DEFAULTS = (("op", "add"), ("cmp", "ge"), ("sem", "acquire"), ("scope", "gpu"), ("constant", None), ("passes", False))


def spec(num_groups=2, num_blocks=2, records_per_lane=16):
    from ikp_cute import ProfileSpec

    return ProfileSpec(num_groups=num_groups, num_blocks=num_blocks, records_per_lane=records_per_lane,
                       warps_per_group=1)


def compile_flags(style: str, trace=None, **options) -> str:
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor as fake

    from ikp_cute.testing.kernels import flags_kernel as fk
    from ikp_cute.testing.sass import keep_options

    args = [fake(Int32, (4,)), Int32(3), Int32(5), style, *(options.get(k, d) for k, d in DEFAULTS)]
    if trace is None:
        return cute.compile(fk.launch, *args, options=keep_options()).__ptx__
    with trace:
        return cute.compile(fk.launch, *args, options=keep_options()).__ptx__


def body(ptx: str) -> str:
    """The kernel's PTX from its .entry on, its mangled name (which holds the Constexpr arguments) replaced."""
    text = ptx[ptx.index(".entry"):]
    name = re.match(r"\.entry\s+(\S+)\(", text).group(1)
    return text.replace(name, "KERNEL")


def without_line_info(ptx: str) -> str:
    """PTX as compiled without line info: a traced compile turns it on for the audit (no instruction changes)."""
    text = ptx.split("\t.section", 1)[0]
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith((".loc", ".file")))


def memory_ops(ptx: str) -> collections.Counter:
    """The flag-relevant memory instructions of the kernel's own code (ours are the /* ikp */ blocks)."""
    own = "\n".join(line for line in ptx.splitlines() if "/* ikp" not in line and "{ .reg" not in line)
    return collections.Counter(m for m in FLAG_OP.findall(own) if ".shared" not in m and ".param" not in m)


def markers(ptx: str) -> collections.Counter:
    return collections.Counter(m.group(1).strip() for m in re.finditer(r"/\* ikp ((?:signal|wait)@[^*]*)\*/", ptx))


def trace(level="waits", **options):
    from ikp_cute.pipelines import trace_pipelines

    return trace_pipelines(spec(), level, address=BAKED, **options)


# --- the helpers ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"cmp": "eq"}, {"cmp": "lt", "sem": "relaxed", "scope": "sys"},
                                     {"op": "store", "scope": "sys"}, {"constant": 7, "cmp": "eq"}])
def test_helpers_outside_a_trace_are_the_hand_written_code(options):
    """ikp_cute.flags.signal / wait outside a trace: the PTX of a kernel that writes the loop and the update by
    hand (ikp_cute/testing/kernels/flags_kernel.py), instruction for instruction."""
    assert body(compile_flags("helper", **options)) == body(compile_flags("hand", **options))


def test_traced_helpers_record_signal_and_blocked_wait():
    tr = trace()
    ptx = compile_flags("helper", tr)
    flags = tr.metadata()["flags"]
    signal, wait = flags
    assert signal["kind"] == "signal" and signal["op"] == "ikp_cute.flags.signal(add)" and signal["value"] == 1
    assert wait["kind"] == "wait" and wait["cmp"] == "ge" and wait["expected"] == "recorded"
    assert signal["site"].startswith("flags_kernel.py:") and wait["site"].startswith("flags_kernel.py:")
    assert {f["id"] for f in flags} == {tr.spec.events.id(f"{f['kind']}@{f['site']}") for f in flags}
    found = markers(ptx)
    assert found[f"signal@{signal['site']} time"] == 1 and found[f"signal@{signal['site']}"] == 1
    assert found[f"wait@{wait['site']} begin-time"] == 1
    assert found[f"wait@{wait['site']} begin"] == 1 and found[f"wait@{wait['site']} end"] == 1
    # the wait's reservation stores FLAG_ADDR and its expected value (a runtime Int32) as FLAG_VALUE
    reserve = next(line for line in ptx.splitlines() if f"/* ikp wait@{wait['site']} begin */" in line)
    assert f"or.b32 m, tag, {FLAG_ADDR_TAG};" in reserve and f"or.b32 m, tag, {FLAG_VALUE_TAG};" in reserve
    assert reserve.count("@fit st.global.b64") == 2 and "mov.u32 need, 4;" in reserve  # BEGIN END ADDR VALUE
    # the signal: its FLAG_VALUE only when several lanes add together (match.any counts them)
    record = next(line for line in ptx.splitlines() if f"/* ikp signal@{signal['site']} */" in line)
    assert "selp.u32 need, 3, 2, opt;" in record and "@opt st.global.b64" in record
    assert "match.any.sync.b64" in ptx


def test_constant_expected_and_recorded_store_value():
    tr = trace()
    ptx = compile_flags("helper", tr, op="store", constant=7, cmp="eq")
    signal, wait = tr.metadata()["flags"]
    assert signal["update"] == "store" and signal["value"] == "recorded" and wait["expected"] == 7
    reserve = next(line for line in ptx.splitlines() if f"/* ikp wait@{wait['site']} begin */" in line)
    assert "mov.u32 need, 3;" in reserve and f"{FLAG_VALUE_TAG}" in reserve  # BEGIN END ADDR: no value stored
    assert reserve.count("@fit st.global.b64") == 1
    record = next(line for line in ptx.splitlines() if f"/* ikp signal@{signal['site']} */" in line)
    assert "mov.u32 need, 3;" in record and record.count("@fit st.global.b64") == 3  # INSTANT ADDR VALUE


def test_all_slots_or_none():
    """record_with_payload: every record and payload store is predicated on all of them fitting; past
    capacity the lane's DROPPED slot counts them all (room goes to min(room, 0) - need)."""
    ptx = compile_flags("helper", trace())
    for line in ptx.splitlines():
        if "/* ikp signal@" in line and "time" not in line or "/* ikp wait@" in line and line.endswith("begin */"):
            stores = re.findall(r"@(\w+) st\.global\.b64", line)
            assert stores and set(stores) <= {"fit", "opt", "full"} and stores.count("full") == 1, line
            assert "setp.ge.and.s32 fit, room, need, ok;" in line and "min.s32 left, room, 0;" in line


def test_a_passing_wait_costs_a_timer_read_and_its_compare():
    """From the wait's time read to the branch that skips the blocked path: the first probe, its compare and
    nothing of ours (no store, no shared-memory state); the reservation is past that branch."""
    tr = trace()
    ptx = compile_flags("helper", tr)
    wait = tr.metadata()["flags"][1]
    lines = ptx.splitlines()
    start = next(i for i, line in enumerate(lines) if f"ikp wait@{wait['site']} begin-time" in line)
    branch = next(i for i in range(start, len(lines)) if re.search(r"@%p\d+ bra", lines[i]))
    between = [line.strip() for line in lines[start + 1:branch] if line.strip() and not line.strip().startswith("//")
               and not line.strip().startswith(".loc")]
    assert [re.split(r"\s", line)[0] for line in between] == ["ld.acquire.gpu.global.b32", "setp.ge.s32"], between
    reserve = next(i for i, line in enumerate(lines) if f"ikp wait@{wait['site']} begin */" in line)
    assert reserve > branch


def test_level_all_records_waits_that_passed():
    tr = trace("all")
    ptx = compile_flags("helper", tr)
    wait = tr.metadata()["flags"][1]
    lines = ptx.splitlines()
    start = next(i for i, line in enumerate(lines) if f"ikp wait@{wait['site']} begin-time" in line)
    reserve = next(i for i, line in enumerate(lines) if f"ikp wait@{wait['site']} begin */" in line)
    assert not any(re.search(r"@%p\d+ bra", line) for line in lines[start:reserve])  # reserved unconditionally


# --- the library primitives, hooked (the examples) -----------------------------------------------------------


@pytest.fixture(scope="module")
def examples_ptx():
    """{(example, wait kind): (plain PTX, traced PTX, trace metadata)}."""
    from ikp_cute.pipelines import trace_pipelines
    from tests.support.flag_examples import compile_deps, compile_dist

    out = {}
    for example, compile_one in (("deps", compile_deps), ("dist", compile_dist)):
        for wait_kind in ("ld", "cas"):
            plain = compile_one(wait_kind, False)
            tr = trace_pipelines(spec(8, 132, 64), address=BAKED)
            with tr:
                traced = compile_one(wait_kind, False)
            out[(example, wait_kind)] = (plain, traced, tr.metadata(), compile_one(wait_kind, False))
    return out


@pytest.mark.parametrize("example", ["deps", "dist"])
@pytest.mark.parametrize("wait_kind", ["ld", "cas"])
def test_hooked_primitives_keep_their_memory_operations(examples_ptx, example, wait_kind):
    plain, traced, meta, after = examples_ptx[(example, wait_kind)]
    assert after == plain  # nothing patched once the context is left
    plain_ops, traced_ops = memory_ops(plain), memory_ops(traced)
    assert set(traced_ops) == set(plain_ops), (set(traced_ops) ^ set(plain_ops))
    probe = next(op for op in plain_ops if op.startswith("ld.relaxed") or ".cas." in op)
    assert traced_ops - plain_ops == collections.Counter({probe: 1})  # the first probe, peeled out of the loop
    assert not any(op.startswith("multimem") for op in traced_ops) and "multimem" not in traced
    scope = ".sys" if example == "dist" else ".gpu"
    assert all(scope in op for op in traced_ops if op.startswith(("red.", "ld.relaxed", "fence.")))
    signal, wait = meta["flags"]
    assert signal["op"] == "red_add1" and signal["order"] == "release" and signal["scope"] == scope[1:]
    assert wait["op"] == {"ld": "spin_lock_ld_lt_relaxed_wait", "cas": "spin_lock_atom_cas_acquire_wait"}[wait_kind]
    assert wait["cmp"] == {"ld": "ge", "cas": "eq"}[wait_kind] and "reset" not in wait  # reset_val = expected_val
    assert wait["expected"] == ("recorded" if example == "dist" else 2)  # epoch * chunks is a runtime value
    found = markers(traced)
    assert found[f"signal@{signal['site']}"] == 1 and found[f"wait@{wait['site']} end"] == 1
    flags = next(iter(meta["coverage"].values()))["flags"]
    assert flags["traced"] == flags["sites"] == 2 and flags["untraced"] == flags["removed"] == 0, flags


def test_an_atom_cas_wait_that_resets_the_flag_records_its_reset_value():
    tr = trace()
    ptx = compile_flags("library_cas", tr, constant=None)
    signal, wait = tr.metadata()["flags"]
    assert wait["op"] == "spin_lock_atom_cas_relaxed_wait" and wait["cmp"] == "eq"
    assert wait["expected"] == "recorded" and wait["reset"] == "recorded"
    reserve = next(line for line in ptx.splitlines() if f"/* ikp wait@{wait['site']} begin */" in line)
    assert "mov.u32 need, 5;" in reserve and reserve.count("@fit st.global.b64") == 3  # ADDR, expected, reset
    assert memory_ops(ptx)["atom.global.cas.b32"] == 2  # relaxed, gpu: the first probe and the loop's


def test_hooks_are_gone_after_the_context():
    import cutlass.utils.distributed as distributed

    before = {name: getattr(distributed, name) for name in
              ("red_add1", "spin_lock_ld_lt_relaxed_wait", "spin_lock_atom_cas_relaxed_wait",
               "spin_lock_atom_cas_acquire_wait")}
    with trace():
        assert all(getattr(distributed, name) is not fn for name, fn in before.items())
    assert all(getattr(distributed, name) is fn for name, fn in before.items())


# --- the audit ------------------------------------------------------------------------------------------------


def test_the_audit_lists_flag_sites():
    """A raw release red no hook built is traced where it is (the IR pass); a hand-written spin loop is listed
    untraced, saying what traces it; the audit line counts flag sites apart from barrier sites."""
    from ikp_cute.pipelines.audit import summary

    tr = trace()
    ptx = compile_flags("hand", tr)
    meta = tr.metadata()
    flag_sites = [s for s in meta["barrier_sites"] if s["kind"].startswith("flag")]
    signal = next(s for s in flag_sites if s["kind"] == "flag_signal")
    spin = next(s for s in flag_sites if s["kind"] == "flag_wait")
    assert signal["traced"] and signal["via"] == "ir" and signal["ptx"] == 1
    assert not spin["traced"] and spin["reason"] == "hand-written spin loop (use ikp_cute.flags.wait)"
    assert meta["flags"] == [dict(meta["flags"][0], op="nvvm.red", update="add", value=1)]
    assert markers(ptx)[f"signal@{signal['site']}"] == 1
    line = summary(meta)[0]
    assert line.endswith("1 of 2 flag sites traced (1 untraced: hand-written spin loop (use ikp_cute.flags.wait))")


def test_a_raw_release_store_is_traced_with_its_value():
    tr = trace()
    ptx = compile_flags("hand", tr, op="store", scope="sys")
    (entry,) = tr.metadata()["flags"]
    assert {k: entry[k] for k in ("op", "update", "value", "order", "scope")} == {
        "op": "nvvm.store.ext", "update": "store", "value": "recorded", "order": "release", "scope": "sys"}
    record = next(line for line in ptx.splitlines() if f"/* ikp signal@{entry['site']} */" in line)
    assert "mov.u32 need, 3;" in record and f"or.b32 m, tag, {FLAG_VALUE_TAG};" in record
    assert "st.release.sys.global.b32" in ptx


def test_ops_can_leave_flags_out():
    tr = trace(ops={"wait", "acquire", "bar_sync"})
    ptx = compile_flags("library", tr)
    meta = tr.metadata()
    assert "flags" not in meta and not markers(ptx)
    reasons = {s["reason"] for s in meta["barrier_sites"] if s["kind"].startswith("flag")}
    assert reasons == {"ops= leaves out flag_signal", "ops= leaves out flag_wait"}
    assert without_line_info(body(ptx)).strip() == body(compile_flags("library")).strip()  # the primitives
