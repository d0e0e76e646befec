"""mode="smem": the cursor's records go to this lane's slice of static shared memory; finalize() copies
them to the buffer with the leader's whole warp.

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_device_compile.py):
* Every Profiler of one spec in a kernel (one per role) shares one stage, allocated once at the kernel's
  entry: the stage ProfileSpec sized and checked (test_smem_profilers_of_one_spec_share_one_stage,
  test_smem_stage_is_validated).
* The lane's writer is its default leader, whose warp copies it out: leader= is a trace-time error at
  create and at finalize (test_smem_refuses_another_leader).
* Records are staged and copied out (test_smem_stage_compiles_and_flushes); the copy stops at the records
  kept, and the trailer counts the rest as the cursor's does.
"""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import Int32, Int64, Uint32, cute

from host_decode.core import wire

from .. import inline_ptx
from ..checks import source_site
from ..spec import ProfileSpec, ProfileUsageError
from .cursor import CursorRecorder, room_register
from .lane import Lane, end_window, finish


@dataclasses.dataclass(frozen=True)
class SmemRecorder(CursorRecorder):
    """mode="smem": cursor records go to this lane's slice of static shared memory; finalize() copies
    them to the buffer with the leader's whole warp."""

    staged: cute.Tensor = None

    @classmethod
    def create(cls, spec: ProfileSpec, buffer, group, leader, buffer_ok=None):
        if leader is not None:
            raise ProfileUsageError(
                f"Profiler.create(leader=...) at {source_site()}: mode='smem' copies a lane out with its default "
                "leader's warp at finalize, so the lane's writer is that leader; leader= needs another mode"
            )
        lane = Lane.create(spec, buffer, group, leader, buffer_ok)
        stage = _smem_stage(spec)
        # Every thread of the leader's warp copies the lane out at finalize, so each thread stages in its
        # group's slice; a group out of range (a stray thread: compares, never stores) gets slice 0.
        group_ok = Uint32(lane.group) < Uint32(spec.num_groups)
        first = cutlass.select_(group_ok, lane.group, Int32(0)) * spec.records_per_lane
        staged = cute.make_tensor(stage + first, cute.make_layout(spec.records_per_lane))
        return cls(lane, room_register(spec, lane), spec, staged)

    def words(self):
        return cute.make_tensor(
            cute.recast_ptr(self.staged.iterator, dtype=Int32),
            cute.make_layout((self.spec.records_per_lane, 2), stride=(2, 1)),
        )

    def finalize(self, leader):
        if leader is not None:
            raise ProfileUsageError(
                f"prof.finalize(leader=...) at {source_site()}: mode='smem' takes no leader= (the default "
                "leader's warp copies the lane out)"
            )
        _smem_finalize(self.lane, self.staged, self.room[0], self.spec)
        end_window(self.spec, self.lane, leader)


_SMEM_STAGES: list = []  # (kernel op, spec, pointer): one stage per kernel and spec


def _smem_stage(spec: ProfileSpec):
    """The block's staging area for `spec` (num_groups x records_per_lane int64), allocated once per
    kernel at its entry: every Profiler of the spec (one per role, as kernels build them) shares it, so
    the kernel holds the one stage ProfileSpec sized and checked, not one per Profiler.create."""
    kernel = inline_ptx.kernel_op()
    for known_kernel, known_spec, stage in _SMEM_STAGES:
        if known_spec == spec and kernel is not None and inline_ptx.same_op(known_kernel, kernel):
            return stage
    with inline_ptx.at_kernel_entry():
        stage = cute.arch.alloc_smem(Int64, spec.num_groups * spec.records_per_lane, alignment=16)
    _SMEM_STAGES.append((kernel, spec, stage))
    del _SMEM_STAGES[:-8]  # kernels traced earlier are done with theirs
    return stage


@cute.jit
def _smem_finalize(lane: Lane, staged, room, spec: cutlass.Constexpr):
    count = cutlass.min(Int32(spec.trailer_slot), spec.trailer_slot - room)  # anchors + records kept
    cute.arch.sync_warp()  # the leader's shared-memory stores are visible to its warp
    leader_warp = cute.arch.warp_idx() == lane.group * spec.warps_per_group
    copying = cute.arch.vote_any_sync(lane.leader) & leader_warp
    count = cute.arch.shuffle_sync(count, 0)
    if copying:
        for k in cutlass.range(cute.arch.lane_idx() + wire.ANCHOR_RECORDS, count, 32):
            lane.records[k] = staged[k]
    finish(lane, -room, -room, lane.leader, spec)
