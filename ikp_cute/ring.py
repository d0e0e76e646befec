"""Capture windows and the launch ring (pure Python + torch ops on the session buffer; no cutlass).

A spec with ``window_slots=R > 0`` gives its Session a buffer that starts with a small control block,
followed by a ring of R slots, each one complete single-launch buffer (the v1 buffer + the stray word,
``spec.total_slots`` int64 words, layout unchanged)::

    int64 words [0, CONTROL_WORDS64(R))   control block, int32 words:
      line 0 (bytes 0-127), read by every lane's decision and written by no lane of a closed launch:
        [FILLED_EVERY] filled (slots used, low 16 bits; device) | every (high 16 bits; host)
        [START]        first launch of the window (host; the device empties a window it has finished)
        [STOP]         first launch past the window (host; 0xFFFFFFFF = open-ended; STOP <= START: empty)
        [DONE]         lanes of the running launch that finalized, in a launch that records (device,
                       reset by the last one), or COUNT_ERROR: the last one found TICKS not a whole
                       number of launches; sticky (no launch records) until arm()
      bytes 512-535, the counters every lane adds to:
        [TICKS, +1]    64-bit launch counter (device): every launch adds exactly 2**24, split over its
                       lanes, each holding one tick back until its end, or, in window_branch's copies
                       that do not record, over its blocks (window empty) or warps (ikp_cute/window.py);
                       the launch index is TICKS >> 24
        [LOST, +1]     64-bit: 2**24 per launch in the window that found the ring full (device): NOT
                       recorded, counted
        [STRAY, +1]    64-bit: records of lanes outside the session (a grid larger than num_blocks, a
                       run-time group out of range), over all launches since arm() (device): with a
                       window their launch is not known, so they are counted here, not in a slot
      from byte 640:
        [160 + s]      launch index recorded in slot s (device)
    then R slots of spec.total_slots words; slot s holds the s-th recorded launch.

The rule, evaluated on the device by every thread that decides (:func:`decide` is its reference)::

    in_window = START <= EPOCH < STOP and (EPOCH - START) % every == 0     (EPOCH = TICKS >> 24)
    recording = in_window and filled < R and DONE != COUNT_ERROR        (slot = filled)

The decision loads line 0 and TICKS beside it, and waits for TICKS only when the window is not empty
(START < STOP). Why apart:
every lane adds to TICKS with a `red` during the launch, and a load of a line that atomics are landing
on (or one near it: the next line cost about as much) waits far longer than a load of a line nobody
writes (H100, FA4 with the window closed, docs/capture.md: TICKS beside the window words +1.2%, the
counters 512 bytes away and no TICKS load +0.8%, no load and no adds at all +0.4%). So a closed window
(never opened, `close()`, after `record_while()`, or a window whose last launch has recorded: the last
lane of that launch empties it) decides from line 0 alone; a window that is open or still ahead reads
TICKS as well.

Invariants a change could break, and the tests that guard them:
* A launch is recorded only into a fresh (zeroed) slot: never over an earlier launch. When the ring is
  full the launch is counted in LOST (tests/unit/ikp_cute/test_ring.py::test_ring_full_counts_and_never_overwrites,
  GPU: tests/gpu/test_ring_gpu.py::test_window_picks_launches_and_ring_full_is_counted).
* The window rule of the device PTX equals :func:`decide` (GPU: test_window_rule_matches_reference).
* Every host change of the control block is a stream-ordered torch op on the device (no host sync,
  capturable in a CUDA graph), so window changes apply exactly at launch boundaries of that stream
  (test_host_updates_are_device_ops).
* Every filled slot is decoded as its own launch (launch_index = its recorded launch index), and the
  loss report of each launch is exact as for a single launch (test_launches_decode_each_slot); a slot
  whose launch wrote no record is no Trace and no file, but is named in the ring block
  (``launches_without_records``: test_a_launch_without_records_is_counted_not_fatal).
* The host reads a control block only when its counters can be true: filled <= R, filled + lost <=
  launches seen, launch index and STRAY in range; otherwise a DecodeError names the counter
  (test_impossible_counters_are_refused_naming_the_counter).
* ``save(DIR)`` always writes DIR/PREFIX_ring.json (the ring block: launches seen, recorded, lost,
  stray records), so a window that never opened leaves a record of it
  (test_save_of_a_window_that_never_opened_says_so).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from host_decode.core.errors import DecodeError

FILLED_EVERY, START, STOP, DONE = 0, 1, 2, 3  # int32 words of line 0 (one 16-byte load)
TICKS, LOST, STRAY = 128, 130, 132  # 64-bit counters, 512 bytes past the window words (ring.py: why)
SLOT_EPOCHS = 160  # int32 word of slot 0's launch index
HEADER_WORDS32 = SLOT_EPOCHS
TICK_BITS = 24  # a launch adds 2**24 ticks: at least 16 per lane (lanes <= 2**20, the v1 limit)
COUNT_ERROR = 1 << 31  # DONE after a recording launch whose last lane found the count off
LAUNCH_TICKS = 1 << TICK_BITS
MAX_SLOTS = 0xFFFF  # filled and every share one int32 word (16 bits each)
MAX_EVERY = 0x7FFF  # stays positive in the int32 word
OPEN_ENDED = 0xFFFFFFFF
U32 = 1 << 32
REARM = "session.ring.arm(reset_epoch=True) clears the count"


def control_words64(slots: int) -> int:
    """int64 words of the control block for `slots` ring slots (kept a multiple of 2: 16-byte aligned ring)."""
    words32 = HEADER_WORDS32 + slots
    words64 = (words32 + 1) // 2
    return words64 + (words64 % 2)


def check_slots(slots: int) -> None:
    if not isinstance(slots, int) or not 0 <= slots <= MAX_SLOTS:
        raise ValueError(f"window_slots={slots!r}: expected an int in 0..{MAX_SLOTS} (0 = no window)")


def _u64(control: np.ndarray, word: int) -> int:
    c = np.asarray(control).astype(np.int64) % U32
    return int(c[word]) | int(c[word + 1]) << 32


def launch_index(control: np.ndarray) -> int:
    """The running launch's index (launches counted so far): TICKS >> 24, as the device reads it (u32)."""
    return (_u64(control, TICKS) >> TICK_BITS) % U32


def lane_share(lane: int, lanes: int) -> int:
    """Ticks lane `lane` of `lanes` adds to the launch count: the shares of a launch sum to 2**24."""
    quotient, remainder = divmod(LAUNCH_TICKS, lanes)
    return quotient + (1 if lane < remainder else 0)


def decide(control: np.ndarray, slots: int) -> tuple[bool, bool, int]:
    """(in_window, recording, slot) of the launch about to run, from the control block's int32 words:
    the reference of the device rule (ikp_cute/window.py)."""
    c = np.asarray(control).astype(np.int64) % U32
    epoch = launch_index(control)
    filled_every, start, stop, done = (int(c[i]) for i in (FILLED_EVERY, START, STOP, DONE))
    filled, every = filled_every & 0xFFFF, max(filled_every >> 16, 1)
    in_window = start <= epoch < stop and ((epoch - start) % U32) % every == 0
    recording = in_window and filled < slots and done < COUNT_ERROR
    return in_window, recording, filled if recording else 0


def count_parts(units: int) -> tuple[int, int]:
    """(part, remainder) of a launch's 2**24 ticks over `units` counting units (blocks or warps of
    window_branch's copies that do not record): each unit adds `part`, the first one also `remainder`
    (ikp_cute/window.py count_copy bakes these for the spec's own grid and divides at run time for
    another). Every part is at least one tick: a unit's own part lands after its own read."""
    if not 1 <= units <= LAUNCH_TICKS:
        raise ValueError(f"count_parts: {units} units do not split {LAUNCH_TICKS} ticks into parts of >= 1")
    return LAUNCH_TICKS // units, LAUNCH_TICKS % units


def run_launch(control: np.ndarray, slots: int, lanes: int = 3, order=None, reads=None) -> list[int]:
    """What one launch's `lanes` lanes do to the control block (reference, in place): every lane adds its
    share less one tick at create (and its share to LOST when the launch is in the window but the ring is
    full) and the held tick at its end; in a launch that records, each lane's end is followed by its DONE
    step, and the last one writes the slot's launch index (that of TICKS - 1) and advances filled (and
    empties the window when no later launch is in it), or leaves DONE at COUNT_ERROR when TICKS is not a
    whole number of launches.

    `order`: the steps as (lane, "create" | "end") pairs in the order they land (default: every create,
    then every end; a lane's end after its create); `reads`: {step number: lane}, a thread of that lane
    reading the launch index before that step (its lane must not have ended yet). -> the indices those
    reads got, in step order."""
    in_window, recording, slot = decide(control, slots)
    if order is None:
        order = [(lane, "create") for lane in range(lanes)] + [(lane, "end") for lane in range(lanes)]
    ended, seen = set(), []
    for step, (lane, kind) in enumerate(order):
        reader = (reads or {}).get(step)
        if reader is not None:
            if reader in ended:
                raise ValueError(f"run_launch: a read at step {step} by lane {reader}, which has ended")
            seen.append(launch_index(control))
        share = lane_share(lane, lanes)
        if kind == "create":
            if in_window and not recording:
                _add64(control, LOST, share)
            _add64(control, TICKS, share - 1)
            continue
        ended.add(lane)
        _add64(control, TICKS, 1)
        if not recording:
            continue
        done = int(control[DONE]) % U32
        control[DONE] = _i32(done + 1)
        if done == lanes - 1:  # the last lane
            ticks = _u64(control, TICKS)
            filled = int(control[FILLED_EVERY]) % U32 & 0xFFFF
            if filled < slots and ticks % LAUNCH_TICKS == 0:  # a count error records no slot
                index = ((ticks - 1) >> TICK_BITS) % U32
                control[SLOT_EPOCHS + filled] = _i32(index)
                control[FILLED_EVERY] = _i32(int(control[FILLED_EVERY]) % U32 + 1)
                stop, every = int(control[STOP]) % U32, max(int(control[FILLED_EVERY]) % U32 >> 16, 1)
                if stop - index <= every:  # the window's last launch: empty it (later decisions skip TICKS)
                    control[START] = control[STOP] = 0
            control[DONE] = _i32(COUNT_ERROR if ticks % LAUNCH_TICKS else 0)
    return seen


def _add64(control: np.ndarray, word: int, value: int) -> None:
    total = (_u64(control, word) + value) % (1 << 64)
    control[word], control[word + 1] = _i32(total), _i32(total >> 32)


def _i32(value: int) -> int:
    value %= U32
    return value - U32 if value >= 1 << 31 else value


class Ring:
    """The host's handle on a windowed Session's buffer (``session.ring``): window control, arming, and
    reading the filled slots. All writes are torch ops on the buffer's device, in stream order."""

    def __init__(self, session):
        spec = session.spec
        self.session = session
        self.slots = spec.window_slots
        self.control_words64 = control_words64(self.slots)
        self.slot_words = spec.total_slots
        expected = self.control_words64 + self.slots * self.slot_words
        if session.buffer.numel() != expected:
            raise DecodeError(
                f"buffer of {session.buffer.numel()} int64 words for a ring of {self.slots} slots, which needs "
                f"{expected} ({self.control_words64} control + {self.slots} x {self.slot_words}): the buffer "
                "belongs to another spec",
                source="ring",
            )
        self.control = session.buffer[: self.control_words64].view(_torch().int32)
        self.counters = session.buffer[: self.control_words64]  # int64: [TICKS // 2], [LOST // 2]
        self.ring = session.buffer[self.control_words64 :].view(self.slots, self.slot_words)

    # --- window control (stream-ordered device writes) ------------------------------------------------

    def window(self, start: int, count: int, every: int = 1, relative: bool = False) -> None:
        """Record launches start, start+every, ..., start+(count-1)*every. Launch indices count every launch
        of the kernel since the session was created; relative=True counts from the next launch on the
        stream (start=0: the next one), without reading the counter back."""
        for name, value, low in (("start", start, 0), ("count", count, 0), ("every", every, 1)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"window({name}={value!r}): expected an int >= {low}")
        if every > MAX_EVERY:
            raise ValueError(f"window(every={every}): at most {MAX_EVERY}")
        span = 0 if count == 0 else (count - 1) * every + 1
        if start + span >= 1 << 31:
            raise ValueError(f"window: launch {start + span} is past the launch counter's range")
        if relative:
            self.control[START].copy_(self._launch_index() + start)
            self.control[STOP].copy_(self.control[START] + span)
            self._set_every(every, _torch())
        else:
            self._set(start=start, stop=start + span, every=every)

    def close(self) -> None:
        """No launch records from the next one on."""
        self._set(start=0, stop=0, every=1)

    def open(self) -> None:
        """Every launch from the next one on records (until the ring is full)."""
        torch = _torch()
        self.control[START].copy_(self._launch_index())
        self.control[STOP].fill_(_i32(OPEN_ENDED))
        self._set_every(1, torch)

    @contextlib.contextmanager
    def record_while(self):
        """``with session.record_while(): ...``: launches issued on this stream inside the block record."""
        self.open()
        try:
            yield self
        finally:  # empty from the next launch on (START = STOP): decisions skip TICKS again
            index = self._launch_index()
            self.control[START].copy_(index)
            self.control[STOP].copy_(index)

    def _launch_index(self):
        """The next launch's index as a device tensor (int32, TICKS >> 24), without a host read."""
        return (self.counters[TICKS // 2] >> TICK_BITS).to(_torch().int32)

    def _set(self, start: int, stop: int, every: int) -> None:
        self.control[START].fill_(_i32(start))
        self.control[STOP].fill_(_i32(stop))
        self._set_every(every, _torch())

    def _set_every(self, every: int, torch) -> None:
        filled = torch.bitwise_and(self.control[FILLED_EVERY], 0xFFFF)
        self.control[FILLED_EVERY].copy_(filled + (every << 16))

    # --- arming and reading ---------------------------------------------------------------------------

    def arm(self, reset_epoch: bool = False) -> None:
        """Zero every slot (pre-writing its header) and mark the ring empty; LOST, STRAY and DONE (a count
        error included) back to 0. Keeps the window and, unless reset_epoch, the launch counter (rounded down to
        a whole launch)."""
        from host_decode.core import wire

        torch = _torch()
        self.ring.zero_()
        self.ring[:, 0] = wire.pack_header(self.session.spec.num_blocks, self.session.spec.num_groups)
        self.control[FILLED_EVERY].copy_(torch.bitwise_and(self.control[FILLED_EVERY], ~0xFFFF))
        self.control[DONE].zero_()
        self.counters[LOST // 2].zero_()
        self.counters[STRAY // 2].zero_()
        self.control[SLOT_EPOCHS:].zero_()
        if reset_epoch:
            self.counters[TICKS // 2].zero_()
        else:  # ticks of a miscounted launch would shift where later launches' indices change
            self.counters[TICKS // 2].bitwise_and_(~(LAUNCH_TICKS - 1))

    def state(self) -> dict:
        """Control block as numbers (synchronizes): epoch, filled, lost, window, slot launch indices; as the
        words say, true or not (launches() checks them: check_counters)."""
        raw = self.control.cpu().numpy()
        c = raw.astype(np.int64) % U32
        filled = int(c[FILLED_EVERY] & 0xFFFF)
        ticks, lost, stray = _u64(raw, TICKS), _u64(raw, LOST), _u64(raw, STRAY)
        count_error = int(c[DONE]) >= COUNT_ERROR
        return {
            "epoch": ticks >> TICK_BITS,
            "filled": filled,
            "lost_launches": lost >> TICK_BITS,
            "stray_records": stray,
            "window": {"start": int(c[START]), "stop": int(c[STOP]), "every": max(int(c[FILLED_EVERY] >> 16), 1)},
            "lanes_done": 0 if count_error else int(c[DONE]),
            "count_error": count_error,
            "ticks_pending": ticks % LAUNCH_TICKS + lost % LAUNCH_TICKS,
            "slot_launches": [int(v) for v in c[SLOT_EPOCHS : SLOT_EPOCHS + min(filled, self.slots)]],
            "ring_slots": self.slots,
        }

    def launches(self, state: dict | None = None) -> list[tuple[int, np.ndarray, int]]:
        """(launch index, v1 records as uint64, stray records) of every filled slot, in slot order. A control
        block that cannot be true (check_counters) or a launch not counted whole is a DecodeError. `state`:
        the control block already read (state()), so that a caller's counts and slots are one snapshot."""
        state = self.state() if state is None else state
        check_counters(state)
        if state["count_error"]:
            raise DecodeError(
                "the launch count was off when a recording launch ended (TICKS not a whole number of "
                "launches at its last lane's finalize: a lane counted twice, e.g. two Profilers or a "
                f"Profiler and window_branch for one group, or a lane created again after its finalize); {REARM}",
                source="ring",
            )
        if state["lanes_done"] or state["ticks_pending"]:
            raise DecodeError(
                f"a launch has not finished ({state['lanes_done']} lanes finalized, "
                f"{state['ticks_pending']} of its {LAUNCH_TICKS} launch-count ticks in): read the ring after the "
                "launch completes (and every lane must be counted once per launch: create its Profiler once and "
                "finalize it once, or run window_branch in every warp of its group; a kernel that uses "
                f"window_branch uses it for every group); once the kernel is fixed, {REARM}",
                source="ring",
            )
        recorded = state["slot_launches"]
        if any(b <= a for a, b in zip(recorded, recorded[1:])) or any(v >= state["epoch"] for v in recorded):
            raise DecodeError(
                f"slot launch indices {recorded} are not increasing below the launch count "
                f"{state['epoch']}: one launch was recorded more than once (a lane counted twice); {REARM}",
                source="ring",
            )
        spec = self.session.spec
        host = self.ring[: state["filled"]].cpu().numpy()
        return [
            (launch, host[s, : spec.v1_slots].view(np.uint64).copy(), int(host[s, spec.stray_slot]))
            for s, launch in enumerate(state["slot_launches"])
        ]

    def decode(self) -> list:
        """One host_decode Trace per filled slot that holds records; meta carries launch_index and the ring
        block (ring counts; a launch that wrote no record is listed there, not decoded: warned)."""
        from host_decode.core.decoder import decode

        state = self.state()
        launches = self.launches(state)
        block = _ring_block(state, launches)
        _warn_unrecorded("ring.decode()", block)
        names, write_stride = self.session.names(), self.session.spec.write_stride
        return [
            decode(records, names=names, write_stride=write_stride, meta=self._meta(launch, stray, block))
            for launch, records, stray in launches
            if launch not in block["launches_without_records"]
        ]

    def save(self, directory: str | Path, prefix: str = "launch", force: bool = False) -> list[Path]:
        """One capture per filled slot that holds records: DIRECTORY/PREFIX_<launch>.npy + sidecar (launch_index,
        ring block), and always DIRECTORY/PREFIX_ring.json (the ring block: launches seen, recorded, lost,
        stray records, launches without records), so a window that never opened leaves its counts (and a
        warning); ``ikp stats DIRECTORY`` reads the captures as one session. A directory that already holds
        PREFIX_*.npy is refused (it would mix two sessions) unless force=True, which removes those files
        first. -> the .npy paths."""
        from host_decode.load.capture import save_capture
        from host_decode.load.ring import write_ring_summary

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        stale = sorted(directory.glob(f"{prefix}_*.npy"))
        if stale and not force:
            raise FileExistsError(
                f"ring.save({str(directory)!r}): it already holds {len(stale)} {prefix}_*.npy captures (e.g. "
                f"{stale[0].name}); `ikp stats` would read them as launches of this session. Use an empty "
                "directory, or force=True to remove them first"
            )
        state = self.state()
        launches = self.launches(state)  # refuses an impossible control block before anything is removed
        block = _ring_block(state, launches)
        for old in stale:
            old.unlink()
            old.with_suffix(".json").unlink(missing_ok=True)
        paths = []
        for launch, records, stray in launches:
            if launch in block["launches_without_records"]:
                continue
            meta = self._meta(launch, stray, block)
            meta.pop("format", None)
            paths.append(save_capture(directory / f"{prefix}_{launch:06d}.npy", records, self.session.names(), **meta))
        saved = [int(p.stem.rsplit("_", 1)[1]) for p in paths]
        write_ring_summary(directory, prefix, self.session.kernel, block, saved)
        _warn_unrecorded(f"ring.save({str(directory)!r})", block)
        return paths

    def _meta(self, launch: int, stray: int, block: dict) -> dict:
        meta = self.session.meta_for_slot(stray)
        meta.update(launch_index=launch, ring=block)
        return meta


def check_counters(state: dict) -> None:
    """Refuse a control block (Ring.state()) whose counters cannot be true, naming the counter: more slots
    filled than the ring has, a launch index past 32 bits, more launches recorded and lost than seen, a
    STRAY count that is negative as an int64 (each a corrupt word, or a buffer of another spec)."""
    filled, slots, seen, lost = state["filled"], state["ring_slots"], state["epoch"], state["lost_launches"]
    cure = "session.ring.arm(reset_epoch=True) empties the ring and restarts the counters"
    if filled > slots:
        reason = f"FILLED is {filled}, but the ring has {slots} slots"
    elif seen >= U32:
        reason = f"TICKS counts {seen} launches, past the 32-bit launch index"
    elif filled + lost > seen:
        reason = f"LOST counts {lost} launches; with FILLED = {filled} that is more than the {seen} launches seen"
    elif state["stray_records"] >= 1 << 63:
        reason = f"STRAY is {state['stray_records']}, negative as a 64-bit count"
    else:
        return
    raise DecodeError(f"impossible control block: {reason}; {cure}", source="ring")


def _ring_block(state: dict, launches: list) -> dict:
    """The ring's counts as a sidecar / summary / meta block (docs/capture.md). launches_without_records:
    launches recorded into a slot that holds no record after its header (nothing to decode; counted)."""
    return {
        "slots": state["ring_slots"],
        "filled": state["filled"],
        "lost_launches": state["lost_launches"],
        "stray_records": state["stray_records"],
        "window": state["window"],
        "launches_seen": state["epoch"],
        "launches_without_records": [launch for launch, records, _ in launches if not records[1:].any()],
    }


def _warn_unrecorded(call: str, block: dict) -> None:
    """Warn when a read of the ring gives fewer launches than it recorded, or none at all."""
    import warnings

    without = block["launches_without_records"]
    if not block["filled"]:
        window = block["window"]
        reason = (f"no launch recorded: the window (start {window['start']}, stop {window['stop']}, every "
                  f"{window['every']}) took none of the {block['launches_seen']} launches counted "
                  f"({block['lost_launches']} lost, {block['stray_records']} stray records)")
    elif without:
        reason = f"launch(es) {without} wrote no record (their slot holds only its header): counted, not decoded"
    else:
        return
    warnings.warn(f"{call}: {reason}", stacklevel=3)


def _torch():
    import torch

    return torch
