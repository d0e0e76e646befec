"""The trace model: what decode produces and every writer / analysis reads.

Columnar numpy tables (structured arrays), one row per span / instant / lane. All times are int64 ns on
one unwrapped timeline: absolute ``%globaltimer`` ns when ``Trace.absolute`` is true (anchors present),
otherwise ns on a 64-bit timeline that agrees with the device timer modulo 2**32.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

SPAN_DTYPE = np.dtype(
    [
        ("lane", np.int32),
        ("block", np.int32),
        ("group", np.int32),
        ("event", np.int16),
        ("depth", np.int16),  # regions of this lane open (any id) when this one began, in program order
        ("start_ns", np.int64),
        ("end_ns", np.int64),
    ]
)  # 32 bytes a span: a 100 M-record buffer decodes within 3x its own size (benchmarks/decode_bench.py)

INSTANT_DTYPE = np.dtype(
    [
        ("lane", np.int32),
        ("block", np.int32),
        ("group", np.int32),
        ("event", np.int16),
        ("ts_ns", np.int64),
    ]
)

# Payload instants (wire.PAYLOAD_IDS: FLAG_ADDR, FLAG_VALUE), one row each, with the record they belong to
# (the record of their lane just before them in slot order: a user instant or the END of a paired region).
# Rows are sorted by lane, then slot order: the payloads of one record are consecutive, `index` 0, 1, ...
PAYLOAD_DTYPE = np.dtype(
    [
        ("lane", np.int32),
        ("block", np.int32),
        ("group", np.int32),
        ("event", np.int16),  # the owning record's event id
        ("kind", np.uint8),  # the owning record's type: wire.EventType.END (a region) or INSTANT
        ("payload", np.int16),  # wire.FLAG_ADDR_EVENT_ID or wire.FLAG_VALUE_EVENT_ID
        ("index", np.uint8),  # position among its record's payloads (0 = the first after the record)
        ("value", np.uint32),  # the payload's 32 bits (the record's timer field)
        ("ts_ns", np.int64),  # the owning record's time: the instant's, or the region's END
        ("begin_ns", np.int64),  # a region's BEGIN time; = ts_ns for an instant
    ]
)

LANE_DTYPE = np.dtype(
    [
        ("lane", np.int64),
        ("block", np.int64),
        ("group", np.int64),
        ("sm", np.int64),  # -1 when unknown (no finalize record of ours)
        ("first_ns", np.int64),  # first timed record of the lane; -1 when the lane wrote nothing
        ("last_ns", np.int64),
        ("finalize_ns", np.int64),  # -1 when the lane has no finalize
        ("records", np.int64),  # non-zero slots of this lane (malformed ones excluded)
        ("dropped", np.int64),  # records the device dropped past capacity (DROPPED instant)
        ("anchored", np.bool_),
    ]
)


# Dependencies between records on different lanes (e.g. a pipeline commit that released a wait), written
# by the Perfetto writer as flow arrows; `kind` indexes a list of kind names given alongside.
FLOW_DTYPE = np.dtype(
    [("src_lane", np.int64), ("src_ns", np.int64), ("dst_lane", np.int64), ("dst_ns", np.int64), ("kind", np.int64)]
)


@dataclasses.dataclass(frozen=True)
class CounterSeries:
    """One counter track: a value over time (e.g. stages of a pipeline full). block -1: launch-level."""

    name: str
    unit: str
    times_ns: np.ndarray
    values: np.ndarray
    block: int = -1


@dataclasses.dataclass
class Names:
    """Event and group names; ids without a name read `event_<id>` / `group_<id>`."""

    events: dict[int, str] = dataclasses.field(default_factory=dict)
    groups: dict[int, str] = dataclasses.field(default_factory=dict)

    def event(self, event_id: int) -> str:
        return self.events.get(int(event_id), f"event_{int(event_id)}")

    def group(self, group_id: int) -> str:
        return self.groups.get(int(group_id), f"group_{int(group_id)}")

    @classmethod
    def from_json(cls, obj: Any) -> "Names":
        """Accepts {"events": {...}|[...], "groups": {...}|[...]}; dict keys may be ids or names."""
        if not isinstance(obj, dict):
            raise ValueError("names must be a JSON object with 'events' and/or 'groups'")
        return cls(events=_id_map(obj.get("events", {}), "events"), groups=_id_map(obj.get("groups", {}), "groups"))

    def to_json(self) -> dict:
        return {
            "events": {str(k): v for k, v in sorted(self.events.items())},
            "groups": {str(k): v for k, v in sorted(self.groups.items())},
        }


def is_json_int(value: Any) -> bool:
    """A JSON integer: an int, not a bool (JSON's true / false arrive as Python bools, which are ints)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _id_map(value: Any, what: str) -> dict[int, str]:
    if isinstance(value, list):
        return {i: str(name) for i, name in enumerate(value)}
    if not isinstance(value, dict):
        raise ValueError(f"names.{what} must be a list or an object, got {type(value).__name__}")
    out: dict[int, str] = {}
    for k, v in value.items():
        if isinstance(k, int) or (isinstance(k, str) and k.lstrip("-").isdigit()):
            out[int(k)] = str(v)
        elif isinstance(v, int) or (isinstance(v, str) and v.isdigit()):
            out[int(v)] = str(k)  # {"mma": 3}
        else:
            raise ValueError(f"names.{what}: cannot read entry {k!r}: {v!r} (want id -> name or name -> id)")
    return out


@dataclasses.dataclass
class Trace:
    num_blocks: int
    num_groups: int
    write_stride: int
    spans: np.ndarray  # SPAN_DTYPE, sorted by lane, then by begin in program order
    instants: np.ndarray  # INSTANT_DTYPE (user instants; anchors / dropped / finalize are folded into lanes)
    lanes: np.ndarray  # LANE_DTYPE, one row per lane that wrote anything
    loss: "LossReport"
    names: Names
    absolute: bool  # times are absolute %globaltimer ns
    meta: dict = dataclasses.field(default_factory=dict)  # sidecar facts (kernel, device, capacity, ...)
    # PAYLOAD_DTYPE: the payload instants (flag addresses and values) with the record each belongs to; they
    # are neither instants nor spans (statistics and trace files do not see them): docs/flags.md
    payloads: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, PAYLOAD_DTYPE))

    @property
    def num_lanes(self) -> int:
        return self.num_blocks * self.num_groups

    @property
    def start_ns(self) -> int:
        """Earliest timed record of the launch (the origin writers rebase to)."""
        firsts = self.lanes["first_ns"][self.lanes["first_ns"] >= 0]
        return int(firsts.min()) if firsts.size else 0

    @property
    def end_ns(self) -> int:
        return int(self.lanes["last_ns"].max()) if self.lanes.size else 0

    def durations(self) -> np.ndarray:
        return self.spans["end_ns"] - self.spans["start_ns"]

    def sm_of_lane(self, lane: np.ndarray) -> np.ndarray:
        """SM id per lane id (-1 unknown, also for a lane the lane table does not hold), vectorized. The one
        SM-of-lane lookup of the writers
        (tests/unit/host_decode/writers/test_perfetto.py::test_mixed_known_and_unknown_sm)."""
        lane = np.asarray(lane, np.int64)
        sm = np.full(lane.shape, -1, np.int64)
        known = self.lanes["lane"].astype(np.int64)
        if known.size and lane.size:
            o = None if known.size < 2 or (known[1:] > known[:-1]).all() else np.argsort(known, kind="stable")
            sorted_known = known if o is None else known[o]
            at = np.minimum(np.searchsorted(sorted_known, lane), known.size - 1)
            hit = sorted_known[at] == lane
            sm_col = self.lanes["sm"] if o is None else self.lanes["sm"][o]
            sm[hit] = sm_col[at[hit]]
        return sm


LOSS_BUCKETS = (
    "paired_begin",
    "paired_end",
    "instant",
    "finalize",
    "unmatched_begin",
    "unmatched_end",
    "after_finalize",
    "malformed",
    "impossible_span",  # both records of a pair whose END is before its BEGIN (corrupted timer bits)
    "impossible_time",  # a record whose timer jumps >= 2**31 ns from both neighbours and back (a flipped bit)
    "payload_orphan",  # a payload instant without its record (none before it, or one that was lost: docs/flags.md)
)


@dataclasses.dataclass
class LossReport:
    """Every non-zero slot after the header lands in exactly one bucket; the buckets add up to
    ``nonzero_slots`` (checked at construction; tests/unit/host_decode/core/test_decode.py fuzzes it)."""

    nonzero_slots: int
    totals: dict[str, int]
    per_lane: np.ndarray  # structured: lane + one int64 column per bucket, lanes with any record
    malformed_reasons: dict[str, int]  # reason -> count (lane out of range, slot/lane mismatch, ...)
    dropped_on_device: int  # from DROPPED instants: records that never reached the buffer

    def __post_init__(self) -> None:
        total = sum(self.totals[b] for b in LOSS_BUCKETS)
        if total != self.nonzero_slots:
            raise AssertionError(f"loss buckets add up to {total}, not {self.nonzero_slots} non-zero slots")

    @property
    def lost(self) -> int:
        """Records that did not become part of a span, instant or finalize, plus device drops."""
        t = self.totals
        return (
            t["unmatched_begin"] + t["unmatched_end"] + t["after_finalize"] + t["malformed"] + t["impossible_span"]
            + t["impossible_time"] + t["payload_orphan"] + self.dropped_on_device
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {"nonzero_slots": self.nonzero_slots}
        out.update(self.totals)
        out["dropped_on_device"] = self.dropped_on_device
        out["malformed_reasons"] = dict(self.malformed_reasons)
        lanes = self.per_lane
        if lanes.size:
            lanes = lanes[np.any([lanes[b] for b in LOSS_BUCKETS[4:]], axis=0)]
        out["lanes_with_losses"] = [{k: int(row[k]) for k in self.per_lane.dtype.names} for row in lanes[:1000]]
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)
