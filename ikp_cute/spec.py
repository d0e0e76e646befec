"""Compile-time profile configuration and the event-name registry (pure Python: no torch, no cutlass).

A :class:`ProfileSpec` is what a kernel receives as a ``cutlass.Constexpr`` argument: every field is
fixed at compile time, so a disabled spec compiles to exactly the uninstrumented kernel
(guarded by tests/unit/ikp_cute/test_device_compile.py::test_disabled_ptx_identical) and the geometry
(write_stride, records_per_lane) folds into immediate address offsets.

Invariants a change could break:
* The buffer is the v1 wire format of host_decode/core/wire.py followed by one stray-record counter
  word (atomic mode keeps its per-lane counters in shared memory, not in the buffer); Session.records()
  hands the decoder exactly the v1 part (tests/unit/ikp_cute/test_device_compile.py::test_spec_geometry_follows_wire).
* Event ids are handed out in order of first use at trace time, from 0 up to wire.MAX_USER_EVENT_ID;
  names declared up front keep the ids they were given (test_event_registry_*).
* A spec hashes by identity: one compiled kernel per spec object, so ids assigned while tracing it
  stay valid for every launch of that compiled kernel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from host_decode.core import wire
from host_decode.load import sidecar

from . import ring

MODES = wire.RECORDING_MODES  # the sidecar's `mode` (host_decode.load.sidecar.SIDECAR): one list for both sides
FENCES = sidecar.FENCES
SMEM_STAGE_LIMIT = 48 * 1024  # static shared memory per block


class ProfileUsageError(ValueError):
    """A profiling call that cannot be right, found while the kernel is traced (compile time); the
    message names the call and its file:line (tests/unit/ikp_cute/test_device_compile.py::test_misuse_*)."""


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
                f"(the v1 tag has {wire.EVENT_ID_BITS} bits; {len(wire.RESERVED_INSTANT_IDS)} ids are reserved)"
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

    mode:             how a lane's records reach the buffer; one recorder per mode (ikp_cute/recorders/):
                      "cursor"   (default) register cursor, records stored at once; one capacity check
                                 per record, shared by a region's END that directly follows its BEGIN.
                      "deferred" cursor whose begin record is stored together with its end record (slot
                                 and time taken at the begin; a trap inside the region loses the begin).
                      "smem"     cursor whose records go to static shared memory (num_groups *
                                 records_per_lane * 8 bytes per block); finalize() copies them out, by the
                                 whole leader warp: finalize is then required.
                      "lean"     no profiler state in registers between regions: the lane's count and tag
                                 sit in 8 bytes of shared memory per group, found afresh by each record; a
                                 leaf region takes both slots with one atomic at its BEGIN and stores both
                                 at its END (6 SASS per record in a loop of leaf regions, the cursor 2.5;
                                 a trap inside a leaf region loses its BEGIN, as in "deferred"; with
                                 fence="cta" no region pairs). For register-tight kernels with sparse
                                 records.
                                 The lane's group is the warp's (``warp_idx // warps_per_group``, 1-D
                                 blocks, ``32 * warps_per_group`` a power of two); ``leader=`` is refused.
                      "atomic"   each region reserves two slots with a shared-memory atomic (several
                                 writers per lane allowed; every thread of the block builds the Profiler).
                      "static"   the caller gives each region a slot index (``index=``).
    num_groups:       lanes per block (warp groups, roles).
    num_blocks:       blocks of the launch the buffer is sized for.
    write_stride:     slots between consecutive records of one lane; default num_blocks * num_groups
                      (persistent kernels: num_sms * num_groups).
    records_per_lane: slots per lane, anchors and trailer included; user capacity is
                      wire.user_capacity(records_per_lane).
    warps_per_group:  the default leader of group g is lane 0 of warp g * warps_per_group; with a window,
                      window_branch needs every group to be exactly this many warps (it counts warps).
    fence:            "none" (default) or "cta": a CTA-scope fence after each begin record and before
                      each end record (the TIRx/warpscope ordering).
    baked_address:    a device address compiled into the kernel as an immediate (no kernel argument),
                      or None (the kernel receives the buffer tensor).
    window_slots:     0 (default): every launch records into the one buffer. R > 0: capture windows and
                      a ring of R launch slots behind a control block (ikp_cute/ring.py, window.py): the
                      host picks at run time which launches record (session.ring.window / record_while),
                      each recorded launch fills the next slot, a full ring counts launches instead of
                      overwriting. Every lane must call finalize() once per launch.

    The kernel's buffer is ``total_slots`` int64 words: the v1 buffer, then one word counting the records
    of threads that claimed a lane which does not exist (a dynamic ``group=`` out of range, a grid larger
    than write_stride): never written anywhere else, counted there (Session.stray_records()).
    """

    enabled: bool = True
    mode: str = "cursor"
    num_groups: int = 1
    num_blocks: int = 1
    write_stride: int | None = None
    records_per_lane: int = 64
    warps_per_group: int = 4
    fence: str = "none"
    events: EventRegistry = dataclasses.field(default_factory=EventRegistry)
    baked_address: int | None = None
    window_slots: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r}: expected one of {MODES}")
        if self.fence not in FENCES:
            raise ValueError(f"fence={self.fence!r}: expected one of {FENCES}")
        if not isinstance(self.events, EventRegistry):
            object.__setattr__(self, "events", EventRegistry(self.events))
        wire.check_geometry(self.num_blocks, self.num_groups)
        if self.write_stride is None:
            object.__setattr__(self, "write_stride", self.num_blocks * self.num_groups)
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
        if self.mode == "smem" and self.num_groups * self.records_per_lane * 8 > SMEM_STAGE_LIMIT:
            raise ValueError(
                f"mode='smem': {self.num_groups} groups x {self.records_per_lane} records x 8 B exceeds the "
                f"{SMEM_STAGE_LIMIT} B of static shared memory a block may declare"
            )
        ring.check_slots(self.window_slots)
        if self.window_slots and self.mode == "lean":
            raise ValueError("window_slots: mode='lean' keeps no lane handle to finalize a window; use another mode")
        if self.warps_per_group < 1:
            raise ValueError(f"warps_per_group={self.warps_per_group} must be >= 1")
        if self.window_slots and self.write_stride * self.warps_per_group > ring.LAUNCH_TICKS:
            raise ValueError(
                f"window_slots: write_stride {self.write_stride} x warps_per_group {self.warps_per_group} exceeds "
                f"{ring.LAUNCH_TICKS}, the ticks of one launch (window_branch counts every warp: ikp_cute/window.py)"
            )
        if self.mode == "lean" and self.warps_per_group & (self.warps_per_group - 1):
            raise ValueError(f"mode='lean' needs warps_per_group to be a power of two (got {self.warps_per_group})")

    # --- geometry ------------------------------------------------------------------------------------

    @property
    def num_lanes(self) -> int:
        return self.num_blocks * self.num_groups

    @property
    def v1_slots(self) -> int:
        """int64 words of the v1 buffer (header + write_stride * records_per_lane)."""
        return wire.buffer_slots(self.write_stride, self.records_per_lane)

    @property
    def stray_slot(self) -> int:
        """Index of the word after the v1 buffer that counts records of threads without a lane."""
        return self.v1_slots

    @property
    def total_slots(self) -> int:
        """int64 words of the kernel's buffer: the v1 buffer + the stray-record counter."""
        return self.v1_slots + 1

    @property
    def buffer_slots(self) -> int:
        """int64 words of the session buffer: total_slots, or with window_slots=R the control block and R
        slots of total_slots (ikp_cute/ring.py)."""
        if not self.window_slots:
            return self.total_slots
        return ring.control_words64(self.window_slots) + self.window_slots * self.total_slots

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
        return f"ikp_{self.mode}_ring{self.window_slots}" if self.window_slots else f"ikp_{self.mode}"

    __str__ = __repr__


def disabled() -> ProfileSpec:
    """A spec that compiles every profiling call away."""
    return ProfileSpec(enabled=False)
