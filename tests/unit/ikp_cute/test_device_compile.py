"""CPU-only tests of the ikp_cute device side: CuTe DSL compiles for sm_90a without a GPU, so every
compile-time property (modes compile in nested branches and loops, PTX contents, the carried cursor,
disabled == uninstrumented PTX, SASS instructions per event) is checked in CI."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from host_decode.core import wire

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
cutlass = pytest.importorskip("cutlass")
cute = pytest.importorskip("cutlass.cute")

from cutlass import Float32, Int32, Int64
from cutlass.cute.runtime import make_fake_compact_tensor

import ikp_cute
from ikp_cute import (
    EventRegistry,
    ProfileSpec,
    ProfileUsageError,
    disabled,
    fake_buffer,
)
from ikp_cute.testing import ptx, sass

MODES = ("cursor", "deferred", "smem", "lean", "atomic", "static")
GRID = (4, 1, 1)
KEEP = sass.keep_options()


def make_spec(mode="cursor", **kw):
    base = {
        "mode": mode,
        "num_groups": 2,
        "num_blocks": 4,
        "write_stride": 8,
        "records_per_lane": 64,
    }
    base.update(kw)
    return ProfileSpec(**base)


def x_tensor():
    return make_fake_compact_tensor(Float32, (1024,))


def compile_structured(spec, launcher="launch_structured"):
    from ikp_cute.testing.kernels import structured

    launch = getattr(structured, launcher)
    return cute.compile(launch, x_tensor(), Int32(3), fake_buffer(spec), spec, GRID, options=KEEP)


# --- import hygiene ----------------------------------------------------------------------------------


def test_import_needs_neither_torch_nor_cutlass():
    code = (
        "import sys, ikp_cute; ikp_cute.ProfileSpec; bad = {'torch', 'cutlass'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=os.path.join(os.path.dirname(__file__), "..", "..", ".."),
    )


# --- event registry and spec validation ----------------------------------------------------------------


def test_event_registry_first_use_order_and_pins():
    reg = EventRegistry({"mma": 5})
    assert [reg.id(n) for n in ("load", "mma", "load", "store")] == [0, 5, 0, 1]
    assert reg.as_dict() == {0: "load", 1: "store", 5: "mma"}
    assert EventRegistry(["a", "b"]).as_dict() == {0: "a", 1: "b"}


def test_event_registry_limits():
    with pytest.raises(ValueError, match="outside"):
        EventRegistry({"x": wire.DROPPED_EVENT_ID})
    with pytest.raises(ValueError, match="already taken"):
        EventRegistry({"x": 3, "y": 3})
    reg = EventRegistry()
    for i in range(wire.MAX_USER_EVENT_ID + 1):
        reg.id(f"e{i}")
    with pytest.raises(ValueError, match="user event ids are taken"):
        reg.id("one_too_many")
    with pytest.raises(TypeError):
        EventRegistry().id("")


def test_event_ids_assigned_at_trace_time_are_stable():
    spec = make_spec(events=EventRegistry(["inner"]))
    compile_structured(spec)
    assert spec.events.as_dict() == {0: "inner", 1: "outer", 2: "producer", 3: "tick"}
    compile_structured(spec)  # recompiling the same spec keeps the ids
    assert spec.events.as_dict() == {0: "inner", 1: "outer", 2: "producer", 3: "tick"}


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"mode": "magic"}, "mode"),
        ({"fence": "gpu"}, "fence"),
        ({"write_stride": 7}, "write_stride"),
        ({"records_per_lane": 4}, "no room"),
        ({"num_blocks": 0}, "num_blocks"),
    ],
)
def test_spec_rejects_bad_configuration(kw, match):
    with pytest.raises(ValueError, match=match):
        make_spec(**kw)


def test_spec_geometry_follows_wire():
    spec = make_spec(records_per_lane=10)
    assert spec.v1_slots == wire.buffer_slots(8, 10)
    assert spec.total_slots == spec.v1_slots + 1 and spec.stray_slot == spec.v1_slots
    assert spec.user_capacity == wire.user_capacity(10) == 6
    assert spec.trailer_slot == 8


# --- every mode compiles where kernels need it ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("launcher", ["launch_structured", "launch_warp_specialized"])
def test_modes_compile_in_branches_loops_and_nesting(mode, launcher):
    compiled = compile_structured(make_spec(mode), launcher)
    text = compiled.__ptx__
    assert "%globaltimer" in text
    assert "%smid" in text  # finalize carries the SM id
    assert "st.global.b64" in text
    assert ".local" not in text and "ld.local" not in text and "st.local" not in text
    if mode == "atomic":
        assert "atom.shared.add" in text and "bar.sync" in text  # smem counters, zeroed before a barrier
    elif mode == "lean":
        assert "atom.shared.add.u32" in text and "bar.sync" not in text  # each leader sets its own lane state
    else:
        assert "atom." not in text
    assert text.count("red.global.add") == (mode != "lean")  # the stray count, in finalize only


def test_atomic_mode_compiles_with_several_writers_per_lane():
    text = compile_structured(make_spec("atomic"), "launch_multi_writer").__ptx__
    assert "atom.shared.add" in text


def test_cursor_mode_reads_timer_per_record_without_atomics():
    text = compile_structured(make_spec("cursor")).__ptx__
    assert text.count("%globaltimer") >= 5  # anchor + begin/end of 3 regions + mark
    assert "atom." not in text and "local" not in text


def test_cursor_is_carried_through_dynamic_loop():
    """Every record store in the (non-unrolled) loop must use an address computed in the loop."""
    spec = make_spec("cursor")
    compiled = compile_structured(spec, "launch_carried")
    lines = ptx.instructions(compiled.__ptx__)
    assert ptx.loops(lines), "expected a dynamic loop in the PTX"
    in_loop = [s for s in ptx.global_stores(lines) if any(a <= s[0] <= b for a, b in ptx.loops(lines))]
    assert len(in_loop) == 4  # outer/inner begin + end per iteration
    assert ptx.loop_invariant_stores(compiled.__ptx__) == []


@pytest.mark.parametrize("launcher", ["launch_structured", "launch_warp_specialized"])
def test_smem_stage_compiles_and_flushes(launcher):
    text = compile_structured(make_spec("smem"), launcher).__ptx__
    assert "st.shared" in text and "ld.shared" in text  # staged, then copied out by finalize()


def test_smem_stage_is_validated():
    with pytest.raises(ValueError, match="static shared memory"):
        make_spec("smem", records_per_lane=4096)


def test_deferred_begin_variant_compiles_and_is_carried():
    compiled = compile_structured(make_spec("deferred"), "launch_carried")
    assert ptx.loop_invariant_stores(compiled.__ptx__) == []
    compile_structured(make_spec("deferred"), "launch_warp_specialized")


@pytest.mark.parametrize("launcher", ["launch_structured", "launch_warp_specialized", "launch_carried"])
def test_lean_finds_its_state_afresh_at_every_record_site(launcher):
    """Lean holds nothing between regions: every record site re-reads %tid.x; a record on its own loads the
    lane state and writes the count back, a leaf region takes both slots with one atomic of 2 (each
    structured kernel has both kinds)."""
    text = compile_structured(make_spec("lean"), launcher).__ptx__
    assert ".local" not in text and "bar.sync" not in text
    atomics = re.findall(r"atom\.shared\.add\.u32 [^;]*\], (\d);", text)
    alone = text.count("@p ld.volatile.shared.v2.u32")
    assert atomics and set(atomics) == {"2"} and alone, (atomics, alone)
    assert text.count("st.volatile.shared.u32") == alone
    assert text.count("%tid.x") >= len(atomics) + alone + 1  # and finalize's: nothing kept live


@pytest.mark.parametrize(
    "layout, pairs",
    [
        ("pair_then_mark", 1), ("mark_inside", 0), ("end_elsewhere", 0), ("loop_inside", 0),
        ("static_loop_inside", 1), ("unroll1_loop_inside", 0), ("long_loop_inside", 0),
    ],
)
def test_lean_pairs_only_leaf_regions_ended_in_their_block(layout, pairs):
    """A lean region stores both records at its END (one atomic of 2 at its BEGIN) only when nothing was
    recorded inside it, its END is in its BEGIN's block and no loop with a run-time trip count lies
    between them; otherwise its BEGIN stores at once (so a region's values are not live across such a
    loop, and a BEGIN whose END does not run is still written)."""
    from ikp_cute.testing.kernels.shared_check import launch_shared_check

    spec = make_spec("lean")
    compiled = cute.compile(launch_shared_check, x_tensor(), Int32(3), fake_buffer(spec), spec, layout, options=KEEP)
    atomics = re.findall(r"atom\.shared\.add\.u32 [^;]*\], (\d);", compiled.__ptx__)
    assert atomics.count("2") == pairs, atomics


def test_lean_with_a_cta_fence_pairs_no_region():
    """fence="cta" puts a fence after each BEGIN record: a leaf region's BEGIN is then stored where it is
    traced, before its fence, not moved to its END."""
    from ikp_cute.testing.kernels.shared_check import launch_shared_check

    spec = make_spec("lean", fence="cta")
    compiled = cute.compile(
        launch_shared_check, x_tensor(), Int32(3), fake_buffer(spec), spec, "pair_then_mark", options=KEEP
    )
    assert "atom.shared" not in compiled.__ptx__ and "fence.acq_rel.cta" in compiled.__ptx__


def test_lean_state_is_validated():
    with pytest.raises(ValueError, match="power of two"):
        make_spec("lean", warps_per_group=3)
    with pytest.raises(ProfileUsageError, match="leader= is not accepted"):
        compile_structured(make_spec("lean"), "launch_multi_writer")


def test_carry_check_catches_a_stale_cursor():
    """Negative control: a cursor restarted from its pre-loop value in each iteration must be flagged."""
    compiled = compile_structured(make_spec("cursor"), "launch_stale")
    assert len(ptx.loop_invariant_stores(compiled.__ptx__)) == 4


# --- disabled compiles to the uninstrumented kernel ---------------------------------------------------


def test_disabled_ptx_identical_to_uninstrumented():
    from ikp_cute.testing.kernels import plain, structured

    off = cute.compile(
        structured.launch_structured,
        x_tensor(),
        Int32(3),
        None,
        disabled(),
        GRID,
        options=KEEP,
    )
    bare = cute.compile(plain.launch_structured, x_tensor(), Int32(3), GRID, options=KEEP)
    assert ptx.normalize(off.__ptx__) == ptx.normalize(bare.__ptx__)
    enabled = compile_structured(make_spec("cursor"))
    assert ptx.normalize(enabled.__ptx__) != ptx.normalize(bare.__ptx__)  # the comparison can fail


def test_baked_address_needs_no_kernel_argument():
    from ikp_cute.testing.kernels import structured

    address = 0x7F12_3456_7800
    spec = make_spec("cursor", baked_address=address)
    assert fake_buffer(spec) is None
    compiled = cute.compile(
        structured.launch_structured,
        x_tensor(),
        Int32(3),
        None,
        spec,
        GRID,
        options=KEEP,
    )
    text = compiled.__ptx__
    assert str(address) in text or hex(address)[2:] in text.lower()
    params = [line for line in text.splitlines() if line.strip().startswith(".param")]
    assert len(params) == 2, params  # x and iters only


def test_fence_option_emits_a_cta_fence_only_when_asked():
    fenced = compile_structured(make_spec("cursor", fence="cta")).__ptx__
    plain = compile_structured(make_spec("cursor")).__ptx__
    assert "fence.acq_rel.cta" in fenced or "membar.cta" in fenced
    assert "fence" not in plain and "membar" not in plain


def test_static_mode_requires_an_index():
    from ikp_cute.testing.kernels import structured

    with pytest.raises(ProfileUsageError, match="needs index="):
        cute.compile(
            structured.launch_carried,
            x_tensor(),
            Int32(3),
            fake_buffer(make_spec("static")),
            make_spec("static"),
            GRID,
        )


def test_3d_grid_flattens_block_index():
    spec = make_spec("cursor", num_blocks=12, write_stride=24)
    from ikp_cute.testing.kernels import structured

    compiled = cute.compile(
        structured.launch_structured,
        x_tensor(),
        Int32(3),
        fake_buffer(spec),
        spec,
        (2, 3, 2),
        options=KEEP,
    )
    text = compiled.__ptx__
    for sreg in ("%ctaid.y", "%ctaid.z", "%nctaid.x", "%nctaid.y"):
        assert sreg in text


# --- cost: SASS instructions per event, counted from the cubin ---------------------------------------


def compile_misuse(case, mode="cursor", buffer_spec=None, **kw):
    from ikp_cute.testing.kernels import misuse

    spec = make_spec(mode, **kw)
    buf = fake_buffer(buffer_spec or spec)
    return cute.compile(misuse.launch_misuse, x_tensor(), Int32(3), Int32(0), buf, spec, case, 4, options=KEEP)


@pytest.mark.parametrize(
    "case, mode, match",
    [
        ("group_negative", "cursor", r"group=-1 is outside 0\.\.1"),
        ("group_too_big", "atomic", r"group=2 is outside 0\.\.1"),
        ("group_negative", "lean", r"group=-1 is outside 0\.\.1"),  # lean takes the warp's, but -1 is a bug
        ("group_too_big", "lean", r"group=2 is outside 0\.\.1"),
        ("end_without_token", "atomic", r"prof.end\('a'\).*needs the token"),
        ("end_without_token", "static", r"needs index="),
        ("end_without_token", "deferred", r"needs the token"),
        ("end_mismatch", "cursor", r"prof.end\('b'\).*closes the region begun as 'a'"),
        ("end_mismatch", "atomic", r"closes the region begun as 'a'"),
        ("end_other_profiler", "cursor", r"prof.end\('a'\).*by another Profiler"),
        ("end_other_profiler", "deferred", r"by another Profiler"),
        ("begin_without_end", "atomic", r"region 'a' begun at .*misuse.py:\d+ was never ended"),
        ("begin_without_end", "cursor", r"region 'a' begun at .*misuse.py:\d+ was never ended"),
        ("begin_without_end", "lean", r"region 'a' begun at .*misuse.py:\d+ was never ended"),
        ("end_in_other_block", "atomic", r"not at the control-flow level of its begin"),
        ("end_in_other_block", "deferred", r"not at the control-flow level"),
        ("after_finalize", "cursor", r"prof.mark\('late'\).*after prof.finalize\(\)"),
        ("static_index_negative", "static", r"index=-1 is outside"),
    ],
)
def test_misuse_is_a_trace_time_error(case, mode, match):
    with pytest.raises(ProfileUsageError, match=match):
        compile_misuse(case, mode)


def test_misuse_profile_region_without_profiler():
    with pytest.raises(Exception, match=r"profile_region\(prof, 'a'\): prof must be an ikp_cute Profiler.*NoneType"):
        compile_misuse("region_none")


def test_misuse_buffer_smaller_than_spec():
    small = make_spec(num_blocks=2, write_stride=4)
    with pytest.raises(ProfileUsageError, match=r"buffer has \d+ int64 slots but the spec needs \d+"):
        compile_misuse("none", buffer_spec=small)


def test_misuse_that_is_fine_compiles():
    """The negative controls above fail for their misuse, not for the kernel: correct use compiles."""
    for mode in MODES:
        compile_misuse("none", mode)
    compile_misuse("end_in_other_block", "cursor")  # cursor: an unclosed begin decodes as unmatched_begin
    compile_misuse("dynamic_group", "cursor")


def test_dynamic_group_is_range_checked_once():
    """A runtime group: one unsigned compare at setup (negative and too large alike), no per-record cost."""
    text = compile_misuse("dynamic_group").__ptx__
    assert "setp.lt.u32" in text or "setp.gt.u32" in text or "setp.ge.u32" in text or "setp.le.u32" in text


def test_session_needs_a_spec():
    with pytest.raises(TypeError, match="spec must be an ikp_cute.ProfileSpec"):
        ikp_cute.Session(2)
    with pytest.raises(ValueError, match="3 names"):
        ikp_cute.Session(make_spec(enabled=False), groups=["a", "b", "c"])


def test_session_context_manager_says_what_it_does():
    session = ikp_cute.Session(disabled())
    with pytest.raises(TypeError, match="zeroed_then_synced"), session:
        pass
    with session.zeroed_then_synced() as s:  # disabled: nothing to zero, nothing to wait for
        assert s is session


# --- cost: SASS instructions per event, counted from the cubin ---------------------------------------

# Marginal SASS instructions per record of the overhead kernel (16 vs 8 records per loop iteration), per
# mode, with the CUDA 12 ptxas of the CPU wheel: the budget CI holds each mode to. Measured 2026-11-27:
# cursor 3.5, deferred 3.5, smem 3.5, lean 7.0 (12.1 before its leaf regions took both slots with one
# atomic, session 12), atomic 4.5, static 6.5 (docs/device.md "Cost").
SASS_BUDGET = {"cursor": 3.5, "deferred": 3.5, "smem": 3.5, "lean": 7.0, "atomic": 4.5, "static": 6.5}
NVDISASM = pytest.mark.skipif(
    sass.nvdisasm_path() is None, reason="nvdisasm not installed (pip install nvidia-cuda-nvdisasm)"
)


@NVDISASM
@pytest.mark.parametrize("mode", sorted(SASS_BUDGET))
def test_sass_per_event_budget(mode):
    from ikp_cute.testing.kernels.overhead import sass_instructions_per_event

    per_event = sass_instructions_per_event(mode)
    assert 0 < per_event <= SASS_BUDGET[mode], (mode, per_event)


@NVDISASM
def test_cursor_record_ablation():
    """Where a cursor record's instructions go: one timer read, one 64-bit store, one capacity compare per
    region (a region's END shares its BEGIN's), at most one move of the timer into the store's register
    pair, and no address arithmetic (write_stride is compile-time, so consecutive records are immediate
    offsets from one address)."""
    from ikp_cute.testing.kernels.overhead import opcodes_per_event

    per_event = opcodes_per_event("cursor")
    assert per_event["CS2R"] == 1 and per_event["STG"] == 1 and per_event["ISETP"] == 0.5, per_event
    assert set(per_event) <= {"CS2R", "STG", "ISETP", "MOV", "IMAD"}, per_event
    assert per_event.get("MOV", 0) + per_event.get("IMAD", 0) <= 1, per_event


@NVDISASM
def test_record_variants_take_out_one_part_each():
    """benchmarks/record_ablation.py reads each variant's time as the cost of the part it lacks: check in the
    SASS that each lacks exactly that part."""
    from ikp_cute.testing.kernels.overhead import opcodes_per_event
    from ikp_cute.testing.record_variants import VARIANTS

    ops = {name: opcodes_per_event(mode, recorder_class=cls) for name, (mode, cls) in VARIANTS.items()}
    assert ops["per_record_check"]["ISETP"] == 1 and ops["per_record_check"]["STG"] == 1, ops
    assert "ISETP" not in ops["no_check"] and ops["no_check"]["CS2R"] == ops["no_check"]["STG"] == 1, ops
    assert "CS2R" not in ops["no_timer"] and ops["no_timer"]["STG"] == 1, ops
    assert "STG" not in ops["timer_only"] and ops["timer_only"]["CS2R"] == 1, ops
    assert ops["smem_no_check"] == {"CS2R": 1, "STS": 1}, ops
    shared_state = ops["lean_shared_state"]  # the lean record before session 12: a load and a store per record
    assert shared_state["LDS"] == shared_state["STS"] == shared_state["STG"] == 1 and "ATOMS" not in shared_state


@NVDISASM
@pytest.mark.parametrize("mode", ["cursor", "deferred", "smem"])
def test_end_shares_its_begins_check_only_when_adjacent(mode):
    """Three records in each layout; the END shares its BEGIN's `room > 0` only when nothing was recorded
    between them at the same control-flow level (a mark inside the region, or an END inside an `if`,
    brings its own compare back)."""
    from ikp_cute.testing.kernels.shared_check import launch_shared_check

    def compares(layout):
        spec = make_spec(mode, num_groups=2, num_blocks=4, write_stride=8)
        args = (x_tensor(), Int32(3), fake_buffer(spec), spec, layout)
        compiled = cute.compile(launch_shared_check, *args, options=KEEP)
        # counted in the SASS: the shared check reaches the PTX as a second copy of the BEGIN's compare,
        # which ptxas folds into one ISETP
        return sum(sass.opcode(ins).startswith("ISETP") for ins in sass.disassemble(compiled.__cubin__))

    paired = compares("pair_then_mark")
    assert compares("mark_inside") == paired + 1
    if mode != "deferred":  # deferred refuses an END outside its BEGIN's block (test_misuse_*)
        assert compares("end_elsewhere") == paired + 1


def test_lazy_names_resolve():
    assert ikp_cute.Profiler is not None and ikp_cute.profile_region is not None
    with pytest.raises(AttributeError):
        ikp_cute.does_not_exist  # noqa: B018


# --- the real example capture (examples/basic, recorded on an H200 by gpu/device_suite.py) ------------


def test_example_capture_decodes_to_the_program():
    from pathlib import Path

    import numpy as np

    from host_decode.load.capture import load_capture

    path = Path(__file__).resolve().parents[3] / "examples" / "basic" / "capture.npy"
    trace = load_capture(path)
    tiles, lanes = 12, 16  # examples/basic/run.py defaults: 8 blocks x 2 warp groups
    assert trace.loss.lost == 0 and trace.absolute
    assert len(trace.lanes) == lanes and np.all(trace.lanes["sm"] >= 0)
    names = trace.names
    for lane in range(lanes):
        spans = trace.spans[trace.spans["lane"] == lane]
        got = sorted(names.event(e) for e in spans["event"])
        role = "load" if lane % 2 == 0 else "compute"
        assert got == sorted(["tile"] * tiles + [role] * tiles), lane
        inner = spans[np.array([names.event(e) == role for e in spans["event"]])]
        assert set(inner["depth"].tolist()) == {1}
        marks = trace.instants[trace.instants["lane"] == lane]
        assert [names.event(e) for e in marks["event"]] == ["tile_done"] * tiles


def test_usage_errors_name_the_call_site():
    """Every trace-time ProfileUsageError says where in the kernel (file:line), including the token,
    leader= and buffer checks that used not to."""
    cases = [("end_without_token", "deferred"), ("group_negative", "lean")]
    for case, mode in cases:
        with pytest.raises(ProfileUsageError, match=r"misuse\.py:\d+"):
            compile_misuse(case, mode)
    small = make_spec(num_blocks=2, write_stride=4)
    with pytest.raises(ProfileUsageError, match=r"at .*misuse\.py:\d+: the buffer has"):
        compile_misuse("none", buffer_spec=small)


def test_source_site_keeps_a_user_file_under_a_cutlass_named_folder():
    from ikp_cute.checks import source_site

    namespace = {"__name__": "user_kernels", "site": source_site}
    code = compile("def call():\n    return site()\n\ndef outer():\n    return call()\n",
                   "/home/u/my_cutlass_kernels/k.py", "exec")
    exec(code, namespace)
    assert namespace["outer"]() == "/home/u/my_cutlass_kernels/k.py:5"


def test_smem_refuses_another_leader():
    with pytest.raises(ProfileUsageError, match=r"mode='smem' copies a lane out with its default leader"):
        compile_misuse("leader_other", "smem")


def test_lean_checks_a_dynamic_buffer_size_like_every_mode():
    """A buffer tensor of dynamic size: a short one disables recording at run time (README, docs/device.md).
    Lean used to store its anchors and records without looking at the size."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.testing.kernels import misuse

    for mode in MODES:
        spec = make_spec(mode)
        dynamic = make_fake_compact_tensor(Int64, (cute.sym_int(),), assumed_align=16)
        ptx = cute.compile(misuse.launch_misuse, x_tensor(), Int32(3), Int32(0), dynamic, spec, "none", 4,
                           options=KEEP).__ptx__
        assert re.search(rf"setp\.\w+\.s32\s+%p\d+, %r\d+, {spec.buffer_slots - 1};", ptx), mode


def test_smem_profilers_of_one_spec_share_one_stage():
    """One Profiler per role (FA4's shape) used to declare the whole stage once per Profiler.create."""
    ptx = compile_misuse("second_profiler", "smem").__ptx__
    stages = re.findall(r"\.shared \.align 16 \.b8 \w+\[(\d+)\]", ptx)
    assert stages == [str(2 * 64 * 8)], stages


def test_static_region_whose_end_would_be_past_capacity_is_refused():
    """Capacity 61 (odd): region 30's BEGIN takes the last user slot and its END would take the DROPPED slot,
    so it could never be complete. The constant-index check used to accept it (it checked the BEGIN only)."""
    with pytest.raises(ProfileUsageError, match=r"begin\(\) index=30 is outside 0\.\.29"):
        compile_misuse("static_region_past_capacity", "static", records_per_lane=65)
    compile_misuse("static_region_past_capacity", "static", records_per_lane=66)  # capacity 62: region 30 fits
