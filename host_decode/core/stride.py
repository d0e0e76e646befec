"""The lane layout's stride (write_stride): inferred from a buffer without a sidecar, and checked
wherever it comes from, before the decoder sizes anything by it."""

from __future__ import annotations

from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.errors import DecodeError


def infer_write_stride(body: np.ndarray, num_lanes: int) -> int:
    """The lane layout's stride when no sidecar says it: the gcd of (slot offset - lane) over records
    whose lane is in range, if that is a valid stride (>= num_lanes); else num_lanes. Looks at samples
    (the start, row 1 and the end) first. The proposal is checked on records spread over the whole
    buffer: unless it leaves none of them malformed, the candidate that leaves the fewest is taken (the
    proposal, the gcd over every record, the most common offset, num_lanes, in that order on ties); a
    buffer whose sampled records all sit in one row proposes a multiple of the stride, and one corrupted
    tag makes every gcd wrong. Guarded by tests/unit/host_decode/core/test_decode.py::test_inferred_stride_is_checked
    and test_one_corrupted_tag_does_not_break_stride_inference."""
    sample = 1 << 16
    windows = []
    for a, b in sorted([(0, sample), (num_lanes, num_lanes + sample), (body.size - sample, body.size)]):
        a, b = max(a, 0, windows[-1][1] if windows else 0), min(b, body.size)
        if b > a:
            windows.append((a, b))
    nz = np.concatenate([a + np.flatnonzero(body[a:b] != 0) for a, b in windows])
    check = _spread_sample(body)
    proposed = _valid(_stride_from(body, nz, num_lanes), num_lanes, body.size)
    if proposed is not None and _malformed(body, check, proposed, num_lanes) == 0:
        return proposed
    full = _valid(_stride_from(body, np.flatnonzero(body), num_lanes), num_lanes, body.size)
    # one corrupted tag makes both gcds meaningless; the most common offset is still the stride itself
    # (row 1 of a lane holds at least as many records as any later row)
    common = _valid(_most_common_offset(body, check, num_lanes), num_lanes, body.size)
    candidates = [c for c in (proposed, full, common, num_lanes) if c is not None]
    bad = [_malformed(body, check, c, num_lanes) for c in candidates]
    return candidates[int(np.argmin(bad))]  # the first of the best: sampled gcd, full gcd, common offset, num_lanes


def _valid(stride: int | None, num_lanes: int, body_slots: int) -> int | None:
    return stride if stride is not None and num_lanes <= stride <= body_slots else None


def _spread_sample(body: np.ndarray, size: int = 1 << 18) -> np.ndarray:
    """Indices of the non-zero slots among `size` evenly spaced ones (all slots of a small buffer)."""
    step = max(1, body.size // size)
    return step * np.flatnonzero(body[::step] != 0)


def _malformed(body: np.ndarray, idx: np.ndarray, stride: int, num_lanes: int) -> int:
    """How many of the records at body indices idx would be malformed under `stride`."""
    lane = (body[idx] & np.uint64(0xFFFF_FFFF)).astype(np.int64) >> wire.LANE_SHIFT
    return int(((lane >= num_lanes) | (idx % stride != lane)).sum())


def _offsets(body: np.ndarray, nz: np.ndarray, num_lanes: int) -> np.ndarray:
    """Positive (slot - lane) of the records at body indices nz whose lane is in range: multiples of the
    stride in a well-formed buffer."""
    lane = body[nz].astype(np.uint32) >> np.uint32(wire.LANE_SHIFT)
    off = nz - lane
    return off[(lane < num_lanes) & (off > 0)]


def _stride_from(body: np.ndarray, nz: np.ndarray, num_lanes: int) -> int | None:
    off = _offsets(body, nz, num_lanes)
    if not off.size:
        return None
    g = int(np.gcd.reduce(off[:64]))  # if it divides all of them it is their gcd (gcd.reduce is slow)
    return g if _all_multiples(off, g) else int(np.gcd.reduce(off))


def _most_common_offset(body: np.ndarray, nz: np.ndarray, num_lanes: int) -> int | None:
    """The most frequent offset (the smallest on ties)."""
    off = _offsets(body, nz, num_lanes)
    if not off.size:
        return None
    values, counts = np.unique(off, return_counts=True)
    return int(values[np.argmax(counts)])


def _all_multiples(values: np.ndarray, g: int) -> bool:
    """Whether every value is a multiple of g, without a (slow) integer division per value: the float
    quotient proposes the multiple, an exact integer product checks it."""
    q = np.rint(values * (1.0 / g)).astype(np.int64)
    q *= g
    return bool((q == values).all())


def check_stride(value: Any, what: str, num_lanes: int, body_slots: int, source: str | None) -> int:
    """An integer stride (never a string, float or bool: "8", 8.0, NaN and True are refused) between
    num_lanes and the buffer's length, checked before anything is sized by it (a stride far past the
    buffer would otherwise cost memory in proportion to the stride).
    Guarded by tests/unit/host_decode/core/test_decode.py::test_bad_write_stride_is_a_decode_error."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise DecodeError(f"{what} must be an integer, got {value!r} ({type(value).__name__})", source=source)
    stride = int(value)
    if stride < num_lanes:
        raise DecodeError(f"{what} {stride} is smaller than num_lanes {num_lanes}", source=source)
    if stride > body_slots:
        raise DecodeError(
            f"{what} {stride} exceeds the {body_slots} slots after the header: the buffer would not hold "
            f"one record per lane (a v1 buffer has 1 + write_stride * records_per_lane slots)",
            source=source,
        )
    return stride
