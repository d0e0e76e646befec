"""Compile-time profile configuration and the event-name registry (pure Python: no torch, no cutlass).

A :class:`ProfileSpec` is what a kernel receives as a ``cutlass.Constexpr`` argument: every field is
fixed at compile time, so a disabled spec compiles to exactly the uninstrumented kernel
(guarded by tests/test_device_compile.py::test_disabled_ptx_identical) and the geometry
(write_stride, records_per_lane) folds into immediate address offsets.

Invariants a change could break:
* The buffer layout is exactly the v1 wire format of host_decode/core/wire.py (atomic mode keeps its
  per-lane counters in shared memory, not in the buffer).
* Event ids are handed out in order of first use at trace time, from 0 up to wire.MAX_USER_EVENT_ID;
  names declared up front keep the ids they were given (test_event_registry_*).
* A spec hashes by identity: one compiled kernel per spec object, so ids assigned while tracing it
  stay valid for every launch of that compiled kernel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from host_decode.core import wire

MODES = ("cursor", "atomic", "static")
FENCES = ("none", "cta")
STAGES = ("global", "smem")
SMEM_STAGE_LIMIT = 48 * 1024  # static shared memory per block


class EventRegistry:
    """Maps event names to stable ids: pre-declared names first, then names in order of first use."""

    def __init__(self, declared: Iterable[str] | Mapping[str, int] | None = None):
        self._ids: dict[str, int] = {}
        if isinstance(declared, Mapping):
            for name, event_id in declared.items():
                self._pin(name, int(event_id))
        elif declared is not None:
            for name in declared:
                self.id(name)

    def _pin(self, name: str, event_id: int) -> None:
        _check_name(name)
        if not 0 <= event_id <= wire.MAX_USER_EVENT_ID:
            raise ValueError(f"event {name!r}: id {event_id} outside 0..{wire.MAX_USER_EVENT_ID}")
        if event_id in self._ids.values() and self._ids.get(name) != event_id:
            raise ValueError(f"event {name!r}: id {event_id} is already taken by {self.name(event_id)!r}")
        self._ids[name] = event_id

    def id(self, name: str) -> int:
        """The id of `name`, assigning the lowest free id on first use."""
        if name in self._ids:
            return self._ids[name]
        _check_name(name)
        taken = set(self._ids.values())
        event_id = next((i for i in range(wire.MAX_USER_EVENT_ID + 1) if i not in taken), None)
        if event_id is None:
            raise ValueError(
                f"event {name!r}: all {wire.MAX_USER_EVENT_ID + 1} user event ids are taken "
                f"(the v1 tag has {wire.EVENT_ID_BITS} bits; 3 ids are reserved)"
            )
        self._ids[name] = event_id
        return event_id

    def name(self, event_id: int) -> str:
        for name, i in self._ids.items():
            if i == event_id:
                return name
        raise KeyError(event_id)

    def as_dict(self) -> dict[int, str]:
        """{id: name}, sorted by id (what host_decode.core.model.Names.events holds)."""
        return {i: n for n, i in sorted(self._ids.items(), key=lambda item: item[1])}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, name: str) -> bool:
        return name in self._ids


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"event names must be non-empty str, got {name!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class ProfileSpec:
    """Everything the device side needs, fixed at compile time (pass it as a ``cutlass.Constexpr``).

    write_stride:     slots between consecutive records of one lane (>= num_blocks * num_groups;
                      persistent kernels: num_sms * num_groups).
    records_per_lane: slots per lane, anchors and trailer included; user capacity is
                      wire.user_capacity(records_per_lane).
    warps_per_group:  the default leader of group g is lane 0 of warp g * warps_per_group.
    fence:            "none" (default) or "cta": a CTA-scope fence after each begin record and before
                      each end record (the TIRx/warpscope ordering).
    baked_address:    a device address compiled into the kernel as an immediate (no kernel argument),
                      or None (the kernel receives the buffer tensor).
    defer_begin:      cursor mode: store a region's begin record together with its end record (the
                      begin time is read and its slot taken at the begin). Off by default: a begin
                      stored at once survives a kernel that traps or hangs inside the region (it then
                      decodes as an unmatched begin, which is what one debugs a hang with), and the
                      benchmark showed the same cost within noise.
    stage:            cursor mode: "global" (records go straight to the buffer) or "smem" (records go
                      to static shared memory, num_groups * records_per_lane * 8 bytes per block, and
                      finalize() copies them out: finalize is then required, by the whole leader warp).
    lean:             cursor mode: keep no profiler state in registers between records. The lane's
                      cursor and index live in 8 bytes of shared memory per group, and each record
                      re-reads them (a record costs ~12-14 SASS instructions instead of ~4, but nothing
                      is held live across the kernel's loops). For register-tight kernels with sparse
                      records (FA4's consumer warp groups). The lane's group is the warp's
                      (``warp_idx // warps_per_group``, 1-D blocks, ``32 * warps_per_group`` a power of
                      two) and its leader is lane 0 of the group's first warp, so ``leader=`` is not
                      accepted.
    """

    enabled: bool = True
    mode: str = "cursor"
    num_groups: int = 1
    num_blocks: int = 1
    write_stride: int = 1
    records_per_lane: int = 64
    warps_per_group: int = 4
    fence: str = "none"
    events: EventRegistry = dataclasses.field(default_factory=EventRegistry)
    baked_address: int | None = None
    defer_begin: bool = False
    stage: str = "global"
    lean: bool = False

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r}: expected one of {MODES}")
        if self.fence not in FENCES:
            raise ValueError(f"fence={self.fence!r}: expected one of {FENCES}")
        wire.check_geometry(self.num_blocks, self.num_groups)
        if self.write_stride < self.num_blocks * self.num_groups:
            raise ValueError(
                f"write_stride={self.write_stride} < num_blocks*num_groups={self.num_blocks * self.num_groups}: "
                "lanes would overlap"
            )
        if self.write_stride > wire.MAX_LANES:
            raise ValueError(f"write_stride={self.write_stride} exceeds the v1 lane limit {wire.MAX_LANES}")
        if wire.user_capacity(self.records_per_lane) < 1:
            raise ValueError(
                f"records_per_lane={self.records_per_lane} leaves no room for user records "
                f"({wire.ANCHOR_RECORDS} anchors + {wire.TRAILER_RECORDS} trailer are reserved)"
            )
        if self.stage not in STAGES:
            raise ValueError(f"stage={self.stage!r}: expected one of {STAGES}")
        if self.stage == "smem" and self.mode != "cursor":
            raise ValueError(f"stage='smem' needs mode='cursor' (got mode={self.mode!r})")
        if self.stage == "smem" and self.num_groups * self.records_per_lane * 8 > SMEM_STAGE_LIMIT:
            raise ValueError(
                f"stage='smem': {self.num_groups} groups x {self.records_per_lane} records x 8 B exceeds the "
                f"{SMEM_STAGE_LIMIT} B of static shared memory a block may declare"
            )
        if self.lean and (self.mode != "cursor" or self.stage != "global" or self.defer_begin):
            raise ValueError(
                f"lean=True needs mode='cursor', stage='global' and defer_begin=False "
                f"(got mode={self.mode!r}, stage={self.stage!r}, defer_begin={self.defer_begin})"
            )
        if self.warps_per_group < 1:
            raise ValueError(f"warps_per_group={self.warps_per_group} must be >= 1")
        if self.lean and self.warps_per_group & (self.warps_per_group - 1):
            raise ValueError(f"lean=True needs warps_per_group to be a power of two (got {self.warps_per_group})")

    # --- geometry ------------------------------------------------------------------------------------

    @property
    def num_lanes(self) -> int:
        return self.num_blocks * self.num_groups

    @property
    def v1_slots(self) -> int:
        """int64 words of the v1 buffer (header + write_stride * records_per_lane)."""
        return wire.buffer_slots(self.write_stride, self.records_per_lane)

    @property
    def total_slots(self) -> int:
        """int64 words of the kernel's buffer (= v1_slots: the buffer is exactly the v1 buffer)."""
        return self.v1_slots

    @property
    def trailer_slot(self) -> int:
        """Record index k of the DROPPED instant; FINALIZE sits at k = records_per_lane - 1."""
        return self.records_per_lane - wire.TRAILER_RECORDS

    @property
    def user_capacity(self) -> int:
        return wire.user_capacity(self.records_per_lane)

    def event_id(self, name: str) -> int:
        return self.events.id(name)

    def __repr__(self) -> str:
        # Appears in the mangled kernel name: keep it short and free of addresses.
        if not self.enabled:
            return "ikp_off"
        return f"ikp_{self.mode}" + ("_smem" if self.stage == "smem" else "") + ("_lean" if self.lean else "")

    __str__ = __repr__


def disabled() -> ProfileSpec:
    """A spec that compiles every profiling call away."""
    return ProfileSpec(enabled=False)
