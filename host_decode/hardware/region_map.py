"""RegionMap: the per-PC region assignment of one kernel, its JSON form (``ikp-pc2region-v1``) and loader.

Invariants (tests/unit/host_decode/hardware/test_pc2region.py test_map_json_round_trip, test_load_map_refuses_garbage):
every PC has exactly one path; the special buckets ``<outside>``, ``<ambiguous>``, ``<unreachable>`` are always the
first three paths; JSON round-trips exactly; a malformed map is refused with the key or column at fault.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from host_decode.core.errors import DecodeError
from host_decode.core.jsonable import dumps

MAP_FORMAT = "ikp-pc2region-v1"
OUTSIDE = "<outside>"
AMBIGUOUS = "<ambiguous>"
UNREACHABLE = "<unreachable>"
SPECIAL_PATHS = (OUTSIDE, AMBIGUOUS, UNREACHABLE)

# ================================================================================================
# The map
# ================================================================================================


@dataclasses.dataclass
class RegionMap:
    """Per-PC region assignment of one kernel (columnar; JSON via to_json / load_map)."""

    kernel: str
    cubin_sha256: str | None
    pc: np.ndarray  # int64 function-relative byte offsets, ascending
    opcode: list[str]
    region: np.ndarray  # int64 index into `paths`
    is_marker: np.ndarray  # bool: instruction exists only for a marker (instrumentation cost)
    line: np.ndarray  # int64 source line, -1 unknown
    ends_flow: np.ndarray  # bool: unpredicated EXIT / BRA / RET / BRX: the next PC is not its successor
    paths: list[str]  # region paths; the special buckets are always present
    stacks: list[list[int] | None]  # event-id stack per path (None for the special buckets)
    markers: list[dict]
    events: dict[int, str]
    problems: list[str]
    ambiguous_candidates: dict[int, list[str]] = dataclasses.field(default_factory=dict)  # pc -> paths
    reasons: dict[int, str] = dataclasses.field(default_factory=dict)  # pc -> why it is <ambiguous>

    def path_of_pc(self) -> dict[int, str]:
        return {int(p): self.paths[r] for p, r in zip(self.pc, self.region)}

    def pcs_in(self, path: str) -> set[int]:
        k = self.paths.index(path) if path in self.paths else -1
        return {int(p) for p in self.pc[self.region == k]}

    @property
    def code_size(self) -> int:
        return int(self.pc[-1]) + 16 if self.pc.size else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MAP_FORMAT,
            "kernel": self.kernel,
            "cubin_sha256": self.cubin_sha256,
            "num_instructions": int(self.pc.size),
            "code_size": self.code_size,
            "events": {str(k): v for k, v in sorted(self.events.items())},
            "paths": self.paths,
            "stacks": self.stacks,
            "pc": self.pc.tolist(),
            "opcode": self.opcode,
            "region": self.region.tolist(),
            "is_marker": self.is_marker.astype(int).tolist(),
            "ends_flow": self.ends_flow.astype(int).tolist(),
            "line": self.line.tolist(),
            "markers": self.markers,
            "ambiguous_candidates": {str(k): v for k, v in sorted(self.ambiguous_candidates.items())},
            "reasons": {str(k): v for k, v in sorted(self.reasons.items())},
            "problems": self.problems,
        }

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(dumps(self.to_json()))

    def summary(self) -> dict[str, int]:
        counts = np.bincount(self.region, minlength=len(self.paths))
        return {p: int(c) for p, c in zip(self.paths, counts)}


def load_map(path_or_obj: str | dict) -> RegionMap:
    if isinstance(path_or_obj, dict):
        obj, source = path_or_obj, "map"
    else:
        source = str(path_or_obj)
        try:
            with open(path_or_obj) as f:
                obj = json.load(f)
        except json.JSONDecodeError as e:
            raise DecodeError(f"not JSON: {e}", source=source) from None
    if not isinstance(obj, dict) or obj.get("format") != MAP_FORMAT:
        raise DecodeError(f"not a pc2region map (format must be {MAP_FORMAT!r})", source=source)
    try:
        n = len(obj["pc"])
        cols = [obj["opcode"], obj["region"], obj["is_marker"], obj["line"], obj["ends_flow"]]
        if any(len(c) != n for c in cols):
            raise DecodeError("columns pc/opcode/region/is_marker/line/ends_flow differ in length", source=source)
        region = np.asarray(obj["region"], np.int64)
        if region.size and (region.min() < 0 or region.max() >= len(obj["paths"])):
            raise DecodeError("region index out of range of 'paths'", source=source)
        return RegionMap(
            kernel=obj["kernel"],
            cubin_sha256=obj.get("cubin_sha256"),
            pc=np.asarray(obj["pc"], np.int64),
            opcode=list(obj["opcode"]),
            region=region,
            is_marker=np.asarray(obj["is_marker"], bool),
            line=np.asarray(obj["line"], np.int64),
            ends_flow=np.asarray(obj["ends_flow"], bool),
            paths=list(obj["paths"]),
            stacks=list(obj["stacks"]),
            markers=list(obj.get("markers", [])),
            events={int(k): v for k, v in obj.get("events", {}).items()},
            problems=list(obj.get("problems", [])),
            ambiguous_candidates={int(k): v for k, v in obj.get("ambiguous_candidates", {}).items()},
            reasons={int(k): v for k, v in obj.get("reasons", {}).items()},
        )
    except KeyError as e:
        raise DecodeError(f"missing key {e}", source=source) from None
