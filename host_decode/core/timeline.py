"""One 64-bit timeline for the 32-bit timer words of a v1 buffer (step 2 and 4 of host_decode.core.decoder).

Invariants a change could break, with the test guarding each:
* Lanes without anchors are placed by the signed 32-bit distance of their first timer word to a reference
  lane's (lanes of one launch start far less than 2**31 ns apart): `aligned`
  (tests/unit/host_decode/core/test_decode_timeline.py).
* While chunks are decoded, `Timeline.origins` chooses each lane's origin as the final assembly will from
  what it has seen so far, so times usually come out final with no extra pass; where it could not know
  (an anchor later in the buffer, an origin past 2**62 ns) the assembly adds the difference
  (tests/unit/host_decode/core/test_decode_timeline.py,
  tests/unit/host_decode/core/test_decode.py::test_owned_buffer_decodes_like_a_loaded_one).
* A record whose timer jumps >= 2**31 ns away from both neighbours of its lane and back is a flipped
  high bit, never a long region: `timer_outliers` (tests/unit/host_decode/core/test_decode.py::test_flipped_timer_bit_*,
  ::test_one_long_step_is_kept_even_between_unrelated_records).
"""

from __future__ import annotations

import numpy as np

ORIGIN_LIMIT = 1 << 62  # origins beyond this are added after decoding (keeps int64 sums exact)
MAX_ANCHOR_HI = 1 << 30  # ANCHOR_HI words from here on are impossible (times >= 2**62 ns)


class Timeline:
    """Provisional per-lane origins while chunks are decoded, chosen as the decoder's assembly will choose
    them from what is known so far (the reference lane: the first anchored lane, else the first lane with
    records). Exact for the usual buffers (anchors first in their lane, or none at all); otherwise the
    assembly adds the difference to the final origin."""

    def __init__(self) -> None:
        self.ref: int | None = None
        self.absolute = False

    def origins(self, first_raw: np.ndarray, anchor_ns: np.ndarray, anchored: np.ndarray,
                lane_loc: np.ndarray) -> np.ndarray:
        a = np.flatnonzero(anchored)
        if a.size and not self.absolute:
            self.ref, self.absolute = int(anchor_ns[a[0]]), True
        elif self.ref is None and (first_raw >= 0).any():
            self.ref = int(first_raw[np.flatnonzero(first_raw >= 0)[0]])
        if self.ref is None:
            return np.zeros(first_raw.size, np.int64)
        origin = np.where(anchored, anchor_ns, aligned(np.where(first_raw >= 0, first_raw, self.ref), self.ref))
        used = origin[lane_loc]
        if ((used >= ORIGIN_LIMIT) | (used <= -ORIGIN_LIMIT)).any():
            return np.zeros(first_raw.size, np.int64)  # far from zero: the assembly adds it
        return origin


def aligned(first_raw: np.ndarray, ref_abs: int) -> np.ndarray:
    """Each lane's origin on the reference lane's timeline: the signed 32-bit distance of its first raw
    timer value from the reference's (lanes of one launch start far less than 2**31 ns apart)."""
    return ref_abs + (((first_raw - (ref_abs & 0xFFFF_FFFF) + (1 << 31)) & 0xFFFF_FFFF) - (1 << 31))



def timer_outliers(t: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Sorted indices of records whose unsigned steps in and out (same lane) are both >= 2**31 ns: a
    flipped high timer bit (the steps are ~2**31 there and ~2**31 back). A single long step (a region
    longer than 2**31 ns with nothing inside, a lane idle that long) is kept. The one legal history this
    sets aside: a lane idle for more than 2**31 ns (2.1 s) just before AND just after one record, which
    32-bit timers cannot tell from a flipped bit.
    tests/unit/host_decode/core/test_decode.py::test_flipped_timer_bit_*."""
    if t.size < 3:
        return np.zeros(0, np.int64)
    step = np.subtract(t[1:], t[:-1])
    jump = step >= np.uint32(1 << 31)
    if not jump.any():
        return np.zeros(0, np.int64)
    jump[bounds[1:-1] - 1] = False  # from the last record of a lane to the first of the next
    into = np.flatnonzero(jump[:-1] & jump[1:]) + 1  # record k: jump into it (k-1 -> k) and out (k -> k+1)
    return into.astype(np.int64)
