"""The capture sidecar (BUFFER.json beside BUFFER.npy) and the ring summary (PREFIX_ring.json): the one
schema of each, the one writer (`sidecar_text`) and the one validator (`validate`).

SIDECAR names every key the project writes, the JSON type of its value and the values allowed
(docs/sidecar.md shows the table; tests/unit/host_decode/load/test_sidecar.py keeps the two alike). The writers
(host_decode.load.capture.save_capture, and through it ikp_cute's Session.save, PipelineTrace.save and
Ring.save, the examples and the gpu/ scripts; host_decode.load.ring.write_ring_summary) validate what they
are about to write, the readers (`read_sidecar`, host_decode.load.ring) what they read: a value outside
the documented set is a DecodeError naming the file, the key, the value and what is allowed. A null
value is an absent key.

Keys the schema does not name are kept and reach ``trace.meta`` unchanged. A sidecar carries whatever
else its producer knows (``save_capture(..., **meta)`` takes any key; the examples add ``example``;
captures recorded by earlier device builds carry keys such as ``stage``), and nothing of the project
reads such a key, so refusing it would only break captures on disk. What an unknown key must not hide
is a misspelt known one (``Mode``, ``write-stride``) that leaves the decoder on its default: a key that
differs from a known key only in case, ``-`` or ``_`` is refused, naming the key it resembles.

Invariants a change could break (tests/unit/host_decode/load/test_sidecar.py guards each):
* A value outside the documented set is refused on reading and on writing, naming file, key, value and the
  allowed values (::test_an_unknown_mode_is_refused_naming_the_key_and_the_allowed_values,
  ::test_every_key_refuses_a_value_outside_its_set, ::test_the_writer_refuses_what_the_reader_would).
* Every committed sidecar validates, and the writer gives their exact bytes back (sorted keys, indent 1,
  through the one JSON converter core.jsonable): ::test_every_committed_sidecar_validates_and_rewrites.
* Every key the device side writes is in the schema (::test_every_key_the_device_writes_is_in_the_schema).
* `flags` and `flag_buffers` are checked entry by entry (FLAG_SITE, FLAG_BUFFER: the keys each entry needs, one
  entry per event id), naming the entry and the key (tests/unit/host_decode/load/test_sidecar_flags.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from host_decode.core import wire
from host_decode.core.errors import DecodeError
from host_decode.core.jsonable import dumps, to_jsonable
from host_decode.core.model import Names, Trace

FORMAT = "ikp-v1"  # the capture sidecar's `format`
RING_FORMAT = "ikp-ring"  # the ring summary's `format`
FENCES = ("none", "cta")  # ikp_cute.spec.ProfileSpec.fence
PIPELINE_LEVELS = ("waits", "signals", "all")  # ikp_cute.pipelines.trace_pipelines(level=...)
PIPELINE_LANES = ("warp",)  # the device side's pipeline lanes: one warp each
PIPELINE_POLLS = ("begin", "timed", "off")  # ikp_cute.pipelines.trace_pipelines(polls=...)
PIPELINE_SCOPES = ("cluster", "cta")  # who shares a pipeline's barriers (analysis.pipeline_meta)
RELEASED_BY = ("tma_store",)  # what frees a pipeline's stages untraced (analysis.pipeline_meta)


@dataclasses.dataclass(frozen=True)
class Key:
    """One key of a schema: the JSON type of its value (`kind`), the values allowed, what it says."""

    # "int", "str", "bool", "object", "list", "names" ({id: name}), "ints" (list of int), "ring" (RING_BLOCK),
    # "entries" (a list of objects, each checked against `fields`), "value" (an int or "recorded"),
    # "flag_sites" (list of FLAG_SITE), "flag_buffers" (list of FLAG_BUFFER)
    kind: str
    doc: str
    allowed: tuple = ()  # str: the only values allowed (empty: any string)
    minimum: int | None = None  # int: the least value allowed
    fields: dict | None = None  # object / entries: the schema of its keys (others pass, as at the top)

    def rule(self) -> str:
        """What the key takes, in words ('one of 'none', 'cta'', 'an integer >= 1', ...)."""
        if self.allowed:
            return "one of " + ", ".join(map(repr, self.allowed))
        if self.kind == "int":
            return "an integer" + (f" >= {self.minimum}" if self.minimum is not None else "")
        return {"str": "a string", "object": "an object", "list": "a list", "ints": "a list of integers",
                "names": "an object {id: name} or a list of names", "ring": "an object (the ring block)",
                "bool": "true or false", "entries": "a list of objects",
                "value": "an integer or 'recorded'", "flag_sites": "a list of flag sites (FLAG_SITE)",
                "flag_buffers": "a list of flag buffers (FLAG_BUFFER)"}[self.kind]


# the entries of `pipelines` (ikp_cute.pipelines.catalog writes them; analysis.pipeline_meta reads them)
PIPELINE_ENTRY: dict[str, Key] = {
    "name": Key("str", "the pipeline's name (distinct within the capture)"),
    "num_stages": Key("int", "stages of the pipeline", minimum=1),
    "ids": Key("object", "{op: first event id}; stage s is id + s"),
    "scope": Key("str", "cta: the block's own barriers; cluster: shared by the cluster's CTAs", PIPELINE_SCOPES),
    "released_by": Key("str", "tma_store: the TMA unit frees the stages (no traced release)", RELEASED_BY),
    "first_wait_passes": Key("ints", "stages whose first wait passes"),
    "class": Key("str", "the pipeline's class (e.g. PipelineTmaAsync)"),
    "op_type": Key("str", "the producer's operation type"),
    "site": Key("str", "file:line where the pipeline was created"),
    "call_sites": Key("object", "{op: [file:line]} of the traced operations"),
    "producer_arrivals": Key("int", "arrivals that fill a stage", minimum=0),
    "consumer_arrivals": Key("int", "arrivals that empty a stage", minimum=0),
    "tx_bytes": Key("int", "bytes a stage's transaction carries", minimum=0),
}
# `pipeline_options` (trace_pipelines' options)
PIPELINE_OPTIONS: dict[str, Key] = {
    "polls": Key("str", "what a try_wait poll records", PIPELINE_POLLS),
    "named_barriers": Key("bool", "named barriers (bar.sync / bar.arrive) traced"),
    "passing_waits": Key("bool", "waits that pass at once recorded too"),
}


SIDECAR: dict[str, Key] = {
    "format": Key("str", "the wire format", (FORMAT,)),
    "num_blocks": Key("int", "blocks of the launch (the buffer header's)", minimum=1),
    "num_groups": Key("int", "groups (lanes) per block (the buffer header's)", minimum=1),
    "events": Key("names", "region and instant names {event id: name}"),
    "groups": Key("names", "group names {group index: name}"),
    "write_stride": Key("int", "slots between two records of a lane (>= num_blocks * num_groups)", minimum=1),
    "records_per_lane": Key("int", "slots of each lane", minimum=1),
    "mode": Key("str", "how the device reserved slots; atomic and static: out of time order", wire.RECORDING_MODES),
    "fence": Key("str", "cta: a CTA-scope fence after each BEGIN and before each END record", FENCES),
    "stray_records": Key("int", "records of lanes outside the capture, counted on the device", minimum=0),
    "kernel": Key("str", "the kernel's name"),
    "device": Key("str", "the GPU's name"),
    "sm_count": Key("int", "SMs of the GPU", minimum=1),
    "source": Key("str", "what wrote the records (e.g. cuda_include/ikp.cuh)"),
    "launch_index": Key("int", "the launch's index among the kernel's launches", minimum=0),
    "rank": Key("int", "the process (GPU) rank of the launch", minimum=0),
    "host_ns": Key("int", "host clock (ns since the epoch) just before the launch", minimum=0),
    "ring": Key("ring", "the launch ring's counts (RING_BLOCK)"),
    "pipelines": Key("entries", "traced pipelines (PIPELINE_ENTRY)", fields=PIPELINE_ENTRY),
    "barriers": Key("object", "traced named barriers (checked by host_decode.analysis.pipelines.channels_of)"),
    "pipeline_level": Key("str", "what trace_pipelines recorded", PIPELINE_LEVELS),
    "pipeline_lanes": Key("str", "what a lane of the pipeline records is", PIPELINE_LANES),
    "pipeline_options": Key("object", "trace_pipelines' options (PIPELINE_OPTIONS)", fields=PIPELINE_OPTIONS),
    "pipelines_untraced": Key("list", "pipelines seen with no traced operation, each with the reason per op"),
    "barrier_sites": Key("list", "every barrier operation of the traced kernels: traced, or why not (the audit)"),
    "coverage": Key("object", "per kernel: barrier sites in the final PTX, traced, untraced, removed"),
    "hooks_replaced": Key("list", "hooked attributes a kernel replaced while it was traced"),
    "warps_per_group": Key("int", "warps per group of the pipeline records", minimum=1),
    "flags": Key("flag_sites", "traced flag call sites, one event id each (FLAG_SITE; docs/flags.md)"),
    "flag_buffers": Key("flag_buffers", "the buffers a flag address can lie in, in this process (FLAG_BUFFER)"),
    "world_size": Key("int", "processes (ranks) of the distributed program", minimum=1),
    "clock_offset_ns": Key("int", "ns added to this capture's %globaltimer times to reach clock_reference's clock"),
    "clock_error_ns": Key("int", "bound on the error of clock_offset_ns (ikp_cute.clock: half its bracket)",
                          minimum=0),
    "clock_reference": Key("str", "the clock clock_offset_ns leads to (ikp_cute.clock: host CLOCK_REALTIME of "
                                  "<hostname>)"),
    "example": Key("object", "the problem an example ran"),
    "trimmed_from_blocks": Key("int", "the block count of the capture this one was cut from", minimum=1),
}
# the keys that make a JSON object an ikp sidecar (one of them at least), and the names' keys
IDENTIFYING = ("format", "events", "groups", "write_stride", "records_per_lane", "num_blocks", "num_groups")
NAME_KEYS = ("events", "groups")

RING_COUNTS = ("slots", "filled", "lost_launches", "stray_records", "launches_seen")
RING_BLOCK: dict[str, Key] = {
    "slots": Key("int", "slots of the ring", minimum=0),
    "filled": Key("int", "slots filled: launches recorded", minimum=0),
    "lost_launches": Key("int", "launches in the window that found the ring full", minimum=0),
    "stray_records": Key("int", "records of lanes outside the session, counted per ring", minimum=0),
    "launches_seen": Key("int", "launches of the kernel counted since the count began", minimum=0),
    "window": Key("object", "the capture window {start, stop, every}"),
    "launches_without_records": Key("ints", "launches recorded into a slot that holds no record"),
    "rings": Key("int", "rings whose counts were added (a session of several)", minimum=1),
}
WINDOW_KEYS = ("start", "stop", "every")

FLAG_KINDS = ("signal", "wait")
FLAG_UPDATES = ("add", "store")  # a signal's update of the flag
FLAG_CMPS = ("ge", "eq", "lt")  # the condition that ends a wait
FLAG_ORDERS = ("relaxed", "release", "acquire", "acq_rel")
FLAG_SCOPES = ("cta", "cluster", "gpu", "sys")
RECORDED = "recorded"  # a value the device records (FLAG_VALUE) because it is not a compile-time constant
# One traced flag call site (an entry of `flags`); `required` says which keys each kind must have.
FLAG_SITE: dict[str, Key] = {
    "id": Key("int", "its event id (the records' id)", minimum=0),
    "kind": Key("str", "a signal (an instant) or a wait (a region, stored when it blocked)", FLAG_KINDS),
    "op": Key("str", "what was called: the library function, ikp_cute.flags.signal / wait, or the IR op"),
    "site": Key("str", "file.py:line of the call"),
    "order": Key("str", "the memory order of the signal's update or of the wait's probe", FLAG_ORDERS),
    "scope": Key("str", "the memory scope", FLAG_SCOPES),
    "update": Key("str", "signals: how the flag changes", FLAG_UPDATES),
    "value": Key("value", "signals: the amount added or the value stored per lane"),
    "cmp": Key("str", "waits: the condition on the flag that ends the wait", FLAG_CMPS),
    "expected": Key("value", "waits: the value compared with"),
    "reset": Key("value", "waits by atom.cas: the value the flag is set to when the wait ends"),
}
FLAG_REQUIRED = {"signal": ("id", "kind", "op", "site", "order", "scope", "update", "value"),
                 "wait": ("id", "kind", "op", "site", "order", "scope", "cmp", "expected")}
# One buffer a flag address can lie in (an entry of `flag_buffers`): every key required.
FLAG_BUFFER: dict[str, Key] = {
    "name": Key("str", "the buffer's name (the same on every rank for one symmetric buffer)"),
    "owner_rank": Key("int", "the rank whose memory holds this copy", minimum=0),
    "base": Key("int", "its first byte's address in this process", minimum=0),
    "bytes": Key("int", "its size in bytes", minimum=1),
    "elem_bytes": Key("int", "bytes of one flag (offsets are in elements)", minimum=1),
}

RING_SUMMARY: dict[str, Key] = {
    "format": Key("str", "the summary's format", (RING_FORMAT,)),
    "kernel": Key("str", "the kernel's name"),
    "ring": Key("ring", "the ring's counts (RING_BLOCK)"),
    "saved": Key("ints", "launch indices saved as captures"),
}


# --- validation ------------------------------------------------------------------------------------


def _integral(value: Any) -> bool:
    """An integer of JSON (or of in-memory meta: numpy integers too), never a bool."""
    import numbers

    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_value(name: str, key: Key, value: Any, source: str | None) -> None:
    """DecodeError naming `source`, the key, the value and `key.rule()` when `value` is outside the set."""
    if key.kind == "names":
        try:
            check_name_ids(Names.from_json({name: value}))
        except ValueError as e:
            raise DecodeError(f"sidecar names: {e}", source=source) from None
        return
    if key.kind == "ring":
        ring_block({"ring": value}, source)
        return
    if key.kind in ("flag_sites", "flag_buffers"):
        flag_entries(name, key.kind, value, source)
        return
    ok = {
        "int": lambda v: _integral(v) and (key.minimum is None or v >= key.minimum),
        "str": lambda v: isinstance(v, str) and (not key.allowed or v in key.allowed),
        "bool": lambda v: isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "list": lambda v: isinstance(v, list),
        "entries": lambda v: isinstance(v, list),
        "ints": lambda v: isinstance(v, list) and all(_integral(x) for x in v),
        "value": lambda v: _integral(v) or v == RECORDED,
    }[key.kind](value)
    if not ok:
        raise DecodeError(f"{name!r} must be {key.rule()}, got {_shown(value)}", source=source)
    if key.fields is not None:
        for i, entry in enumerate(value if key.kind == "entries" else [value]):
            where = f"{name}[{i}]" if key.kind == "entries" else name
            if not isinstance(entry, dict):
                raise DecodeError(f"{where!r} must be an object, got {_shown(entry)}", source=source)
            validate(entry, key.fields, source, prefix=f"{where}.")


def check_name_ids(names: Names) -> Names:
    """ValueError unless every named event id is one a record can carry (0..wire.MAX_EVENT_ID) and every group
    id is >= 0: a name for an id that cannot occur is a mistake (an off-by-one, another kernel's file)."""
    bad = [i for i in names.events if not 0 <= i <= wire.MAX_EVENT_ID]
    if bad:
        raise ValueError(f"names.events: event id {bad[0]} is outside 0..{wire.MAX_EVENT_ID} (ids a record carries)")
    bad = [i for i in names.groups if i < 0]
    if bad:
        raise ValueError(f"names.groups: group id {bad[0]} is negative")
    return names


def validate(obj: Any, schema: dict[str, Key], source: str | None, prefix: str = "") -> dict:
    """`obj` checked against `schema` (see the module docstring); returns it unchanged. `prefix`: where a
    nested object sits (`pipelines[0].`), so that an error names the key in full."""
    if not isinstance(obj, dict):
        raise DecodeError(f"must be a JSON object, got {type(obj).__name__}", source=source)
    loose = {_loose(k): k for k in schema}
    for name, value in obj.items():
        key = schema.get(name)
        if key is None:
            known = loose.get(_loose(name))
            if known is not None:
                raise DecodeError(f"unknown key {prefix + name!r}: did you mean {prefix + known!r}?", source=source)
            continue
        if value is not None:
            check_value(prefix + name, key, value, source)
    return obj


def flag_entries(name: str, kind: str, value: Any, source: str | None) -> None:
    """`flags` (kind "flag_sites": FLAG_SITE entries, the keys their kind requires, event ids of user events,
    one entry per id) or `flag_buffers` (FLAG_BUFFER entries, every key): a DecodeError naming the entry and key."""
    if not isinstance(value, list):
        raise DecodeError(f"{name!r} must be a list, got {_shown(value)}", source=source)
    schema = FLAG_SITE if kind == "flag_sites" else FLAG_BUFFER
    ids: dict[int, int] = {}
    for i, entry in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(entry, dict):
            raise DecodeError(f"{where!r} must be an object, got {_shown(entry)}", source=source)
        required = FLAG_REQUIRED.get(entry.get("kind"), ("kind",)) if kind == "flag_sites" else tuple(schema)
        missing = [k for k in required if entry.get(k) is None]
        if missing:
            raise DecodeError(f"{where!r} has no {missing[0]!r} (a {kind[:-1].replace('_', ' ')} needs "
                              f"{', '.join(required)})", source=source)
        for k, v in entry.items():
            if k in schema and v is not None:
                check_value(f"{where}.{k}", schema[k], v, source)
        if kind == "flag_sites":
            if entry["id"] > wire.MAX_USER_EVENT_ID:
                raise DecodeError(f"'{where}.id' must be a user event id (<= {wire.MAX_USER_EVENT_ID}), got "
                                  f"{entry['id']}", source=source)
            if entry["id"] in ids:
                raise DecodeError(f"'{where}.id' {entry['id']} is also the id of {name}[{ids[entry['id']]}]",
                                  source=source)
            ids[entry["id"]] = i


def has_flags(trace: Trace) -> bool:
    """The trace (or a part of a merged one, meta["parts"]) declares flag call sites (its sidecar's `flags`):
    what callers ask before they import the flag analysis."""
    meta = trace.meta or {}
    return bool(meta.get("flags")) or any(bool(p.get("flags")) for p in meta.get("parts") or [])


def _loose(name: str) -> str:
    return name.lower().replace("-", "_")


def ring_block(meta: dict, source: str | None) -> dict | None:
    """The ring block of a sidecar, a ring summary or a trace's meta, checked (RING_BLOCK) with its counts as
    ints (0 when absent) and its launches without records as a list of ints; None when there is none."""
    block = meta.get("ring")
    if block is None:
        return None
    if not isinstance(block, dict):
        raise DecodeError(f"'ring' must be an object, got {type(block).__name__}", source=source)
    for name, key in RING_BLOCK.items():
        if block.get(name) is not None:
            check_value(f"ring.{name}", key, block[name], source)
    window = block.get("window") or {}
    for name in WINDOW_KEYS:
        if window.get(name) is not None and not _integral(window[name]):
            raise DecodeError(f"'ring.window.{name}' must be an integer, got {_shown(window[name])}", source=source)
    out = dict(block)
    out.update({k: int(block.get(k) or 0) for k in RING_COUNTS})
    out["launches_without_records"] = [int(v) for v in block.get("launches_without_records") or []]
    return out


def meta_int(meta: dict, name: str, default: int | None, source: str | None) -> int | None:
    """An integer key of SIDECAR in a trace's meta (a sidecar's, or built in memory), checked like the sidecar
    key; absent or null: `default`."""
    value = meta.get(name)
    if value is None:
        return default
    check_value(name, SIDECAR[name], value, source)
    return int(value)


# --- reading and writing ---------------------------------------------------------------------------


def read_json(path: str | Path, not_json: str = "is not valid UTF-8 JSON",
              too_deep: str = "is nested too deeply to read") -> Any:
    """A UTF-8 JSON file parsed; otherwise a DecodeError naming the file and saying `not_json` (with the
    parser's reason) or `too_deep`."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4300 digits
        raise DecodeError(f"{not_json}: {e}", source=str(path)) from None
    except RecursionError:
        raise DecodeError(too_deep, source=str(path)) from None


def parse_sidecar(obj: Any, source: str | None) -> dict:
    """A parsed sidecar, recognised as one and validated (SIDECAR)."""
    if not isinstance(obj, dict):
        raise DecodeError("sidecar must be a JSON object", source=source)
    given = obj.get("format", FORMAT)
    if given != FORMAT or not set(IDENTIFYING).intersection(obj):
        what = ("a Chrome trace" if "traceEvents" in obj else f"'format' is {_shown(given)}" if given != FORMAT
                else f"keys {sorted(obj)[:6]}")
        raise DecodeError(f"is not an ikp capture sidecar ({what}; expected format {FORMAT!r} with "
                          "events/groups): rename it, or pass names with --names", source=source)
    return validate(obj, SIDECAR, source)


def read_sidecar(path: str | Path) -> dict:
    """The validated sidecar of a capture (BUFFER.json next to BUFFER.npy: core.files.sidecar_of, the file
    outputs never replace); {} when there is none."""
    from host_decode.core.files import sidecar_of

    side = sidecar_of(path)
    if not side.exists():
        return {}
    obj = read_json(side, "sidecar is not valid UTF-8 JSON", "sidecar is nested too deeply to be a capture sidecar")
    return parse_sidecar(obj, str(side))


def sidecar_text(side: dict, schema: dict[str, Key], source: str | None) -> str:
    """The one writer of sidecars and ring summaries: `side` in JSON types (core.jsonable), validated against
    `schema`, as text with sorted keys and indent 1."""
    validate(to_jsonable(side), schema, source)  # the JSON types a reader will see (numpy ints, NaN -> null)
    return dumps(side, indent=1, sort_keys=True)
