"""Perfetto files read back the way trace processor imports them: decoded with the official protos
(``perfetto`` package) and replayed (tracks, slices with parent / depth, counters), plus builders of
small traces to write.
"""

from __future__ import annotations

import gzip
import random

import numpy as np
import pytest

from host_decode.core.model import INSTANT_DTYPE, LANE_DTYPE, LOSS_BUCKETS, SPAN_DTYPE, LossReport, Names, Trace
from host_decode.writers import perfetto as pf

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
from google.protobuf.unknown_fields import UnknownFieldSet  # noqa: E402

ORIGIN = 1_700_000_000_000_000_000  # absolute ns, as %globaltimer would give


def make_trace(lanes: dict, *, num_groups: int = 2, sm: dict | None = None, names: Names | None = None,
               meta: dict | None = None) -> Trace:
    """lanes: {lane: [(kind, event, t), ...]} in program order; kind 'B', 'E' or 'I'; t in ns after ORIGIN.
    Pairs per (lane, event) with a stack, like the decoder; depth = regions open (any id) at the begin."""
    spans, instants, lane_rows = [], [], []
    for lane in sorted(lanes):
        block, group = divmod(lane, num_groups)
        open_by_id: dict[int, list] = {}
        rows_open = 0
        for kind, event, t in lanes[lane]:
            if kind == "B":
                open_by_id.setdefault(event, []).append((t, rows_open, len(spans)))
                spans.append(None)
                rows_open += 1
            elif kind == "E":
                t0, depth, row = open_by_id[event].pop()
                spans[row] = (lane, block, group, event, depth, ORIGIN + t0, ORIGIN + t)
                rows_open -= 1
            else:
                instants.append((lane, block, group, event, ORIGIN + t))
        ts = [t for _, _, t in lanes[lane]]
        lane_sm = (sm or {}).get(lane, -1)
        lane_rows.append((lane, block, group, lane_sm, ORIGIN + min(ts), ORIGIN + max(ts), -1, len(ts), 0, True))
    span_arr = np.array([s for s in spans if s is not None], SPAN_DTYPE)
    n = sum(len(v) for v in lanes.values())
    totals = dict.fromkeys(LOSS_BUCKETS, 0)
    totals.update(paired_begin=len(span_arr), paired_end=len(span_arr), instant=len(instants))
    totals["unmatched_begin"] = n - sum(totals.values())
    loss = LossReport(n, totals, np.zeros(0, [("lane", np.int64)]), {}, 0)
    num_blocks = max(lanes) // num_groups + 1
    return Trace(num_blocks, num_groups, num_blocks * num_groups, span_arr, np.array(instants, INSTANT_DTYPE),
                 np.array(lane_rows, LANE_DTYPE), loss, names or Names(), True, meta or {})


def random_trace(seed: int, num_lanes: int = 12, regions: int = 60, overlap: float = 0.3) -> Trace:
    """Random program-order streams: nested regions, re-entrant ids, overlapping different ids,
    equal timestamps (coarse timer), zero-length regions and instants."""
    rng = random.Random(seed)
    lanes = {}
    for lane in range(num_lanes):
        t, stack, async_open, out = 0, [], [], []
        for _ in range(regions):
            t += rng.choice([0, 0, 32, 64, 100])
            r = rng.random()
            if r < 0.35:
                e = rng.randrange(4)
                stack.append(e)
                out.append(("B", e, t))
            elif r < 0.65 and stack:
                out.append(("E", stack.pop(), t))
            elif r < 0.65 + overlap / 2 and len(async_open) < 2:
                e = 8 + len(async_open) + 2 * rng.randrange(2)  # ids never on the stack: may cross anything
                if e not in async_open:
                    async_open.append(e)
                    out.append(("B", e, t))
            elif r < 0.65 + overlap and async_open:
                out.append(("E", async_open.pop(rng.randrange(len(async_open))), t))
            else:
                out.append(("I", 5, t))
        while stack:
            t += rng.choice([0, 32])
            out.append(("E", stack.pop(), t))
        for e in async_open:
            t += rng.choice([0, 32])
            out.append(("E", e, t))
        lanes[lane] = out
    return make_trace(lanes, num_groups=3, sm={lane: lane // 3 % 2 for lane in range(num_lanes)},
                      names=Names(events={0: "mainloop", 1: "mma", 8: "tma"}, groups={0: "producer"}))


class TraceError(AssertionError):
    pass


def unknown_fields(msg, path: str = "") -> list[str]:
    """Every unknown field in msg and its sub-messages (the importer would silently drop them)."""
    found = [
        f"{path or msg.DESCRIPTOR.name}: field {f.field_number} wire type {f.wire_type}" for f in UnknownFieldSet(msg)
    ]
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        items = value if fd.is_repeated else [value]
        for i, sub in enumerate(items):
            found += unknown_fields(sub, f"{path}.{fd.name}[{i}]" if path else f"{fd.name}[{i}]")
    return found


def replay(data: bytes) -> dict:
    """Decode and import `data` like trace processor; raise TraceError on anything it would reject
    or silently change. Returns tracks, slices (with parent / depth), counters."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    trace = pb.Trace()
    trace.ParseFromString(data)
    bad = unknown_fields(trace)
    if bad:
        raise TraceError(f"unknown fields: {bad[:5]}")
    packets = list(trace.packet)
    if not packets:
        raise TraceError("no packets")
    seq = packets[0].trusted_packet_sequence_id
    if seq <= 1:
        raise TraceError(f"sequence id {seq}: must be set and not the service's (1)")
    if not packets[0].sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
        raise TraceError("first packet does not clear incremental state")
    names: dict[int, str] = {}
    arg_names: dict[int, str] = {}
    tracks: dict[int, object] = {}
    events = []
    for i, p in enumerate(packets):
        if p.trusted_packet_sequence_id != seq:
            raise TraceError(f"packet {i}: sequence id {p.trusted_packet_sequence_id} != {seq}")
        if p.HasField("interned_data"):
            for en in p.interned_data.event_names:
                names[en.iid] = en.name
            for an in p.interned_data.debug_annotation_names:
                arg_names[an.iid] = an.name
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.uuid in tracks:
                raise TraceError(f"packet {i}: track uuid {d.uuid} defined twice")
            if d.HasField("parent_uuid") and d.parent_uuid not in tracks:
                raise TraceError(f"packet {i}: parent {d.parent_uuid} of track {d.uuid} not defined before it")
            tracks[d.uuid] = d
        if p.HasField("track_event"):
            te = p.track_event
            uses_interning = te.HasField("name_iid") or any(a.HasField("name_iid") for a in te.debug_annotations)
            if uses_interning and not p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE:
                raise TraceError(f"packet {i}: uses interned data without SEQ_NEEDS_INCREMENTAL_STATE")
            if te.HasField("name_iid") and te.name_iid not in names:
                raise TraceError(f"packet {i}: name_iid {te.name_iid} not interned before use")
            for a in te.debug_annotations:
                if a.HasField("name_iid") and a.name_iid not in arg_names:
                    raise TraceError(f"packet {i}: debug annotation name_iid {a.name_iid} not interned")
            if not p.HasField("timestamp"):
                raise TraceError(f"packet {i}: track event without timestamp")
            events.append((p.timestamp, i, te))
    for u, d in tracks.items():
        if d.HasField("parent_uuid"):
            parent = tracks[d.parent_uuid]
            if parent.child_ordering == pb.TrackDescriptor.EXPLICIT and not d.HasField("sibling_order_rank"):
                raise TraceError(f"track {u} ({d.name}) has no sibling_order_rank under an EXPLICIT parent")
    events.sort(key=lambda x: x[0])  # stable: file order for ties, as the importer's sorter
    stacks: dict[int, list] = {}
    slices, counters = [], {}
    for ts, i, te in events:
        if te.track_uuid not in tracks:
            raise TraceError(f"packet {i}: event on undefined track {te.track_uuid}")
        desc = tracks[te.track_uuid]
        if te.type == pb.TrackEvent.TYPE_COUNTER:
            if not desc.HasField("counter"):
                raise TraceError(f"packet {i}: counter value on non-counter track {desc.name}")
            value = te.double_counter_value if te.HasField("double_counter_value") else te.counter_value
            counters.setdefault(te.track_uuid, []).append((ts, value))
            continue
        if desc.HasField("counter"):
            raise TraceError(f"packet {i}: slice event on counter track {desc.name}")
        stack = stacks.setdefault(te.track_uuid, [])
        args = {arg_names[a.name_iid]: a.int_value for a in te.debug_annotations}
        if te.type in (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_INSTANT):
            s = {"track": te.track_uuid, "name": names[te.name_iid], "ts": ts, "dur": None, "depth": len(stack),
                 "parent": stack[-1] if stack else None, "args": args, "instant": te.type == pb.TrackEvent.TYPE_INSTANT,
                 "flow_ids": list(te.flow_ids), "terminating_flow_ids": list(te.terminating_flow_ids)}
            slices.append(s)
            if s["instant"]:
                s["dur"] = 0
            else:
                stack.append(len(slices) - 1)
        elif te.type == pb.TrackEvent.TYPE_SLICE_END:
            if not stack:
                raise TraceError(f"packet {i}: END on track {desc.name} with nothing open")
            s = slices[stack.pop()]
            s["dur"] = ts - s["ts"]
        else:
            raise TraceError(f"packet {i}: unexpected event type {te.type}")
    left = {u: len(s) for u, s in stacks.items() if s}
    if left:
        raise TraceError(f"slices never closed on tracks {left}")
    return {"tracks": tracks, "slices": slices, "counters": counters, "packets": packets}


def lane_of_track(tracks: dict, num_groups: int) -> dict[int, int]:
    """Group-track uuid -> lane, from the tree alone (block track name, merge key 'group g')."""
    out = {}
    for u, d in tracks.items():
        if d.sibling_merge_key.startswith("group "):
            block = int(tracks[d.parent_uuid].name.split()[1])
            out[u] = block * num_groups + int(d.sibling_merge_key.split()[1])
    return out


def check_against_trace(trace: Trace, result: dict, *, args: bool) -> None:
    """Slices, instants and counters imported from the file equal the trace's tables."""
    lane_of = lane_of_track(result["tracks"], trace.num_groups)
    got_spans, got_inst = [], []
    for s in result["slices"]:
        row = (lane_of[s["track"]], s["name"], s["ts"], s["dur"])
        (got_inst if s["instant"] else got_spans).append(row)
        if args:
            assert s["args"]["lane"] == row[0]
            assert trace.names.event(s["args"]["event"]) == s["name"]
            assert s["args"]["block"] * trace.num_groups + s["args"]["group"] == row[0]
    origin = pf.trace_origin(trace)
    sp = trace.spans
    want_spans = sorted(zip(sp["lane"].tolist(), [trace.names.event(e) for e in sp["event"].tolist()],
                            (sp["start_ns"] - origin).tolist(), (sp["end_ns"] - sp["start_ns"]).tolist()))
    assert sorted(got_spans) == want_spans
    ins = trace.instants
    want_inst = sorted(zip(ins["lane"].tolist(), [trace.names.event(e) for e in ins["event"].tolist()],
                           (ins["ts_ns"] - origin).tolist(), [0] * ins.size))
    assert sorted(got_inst) == want_inst
