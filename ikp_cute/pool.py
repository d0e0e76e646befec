"""The recording pool: one device buffer per process that every kernel traced into it records into, with no
grid, no records per lane and no sizing pass known in advance.

    pool = Pool.create()                                   # 32 MiB by default (DEFAULT_POOL_BYTES)
    with trace_pipelines(pool, level="waits"):             # kernels compiled inside record into the pool
        out = flash_attn_func(q, k, v)                     # launch 0: the default selection skips it
    for _ in range(20):
        out = flash_attn_func(q, k, v)                     # launch 1 records; the others run untouched code
    for buffer, meta in pool.captures():                   # one v1 capture per (kernel, launch)
        save_capture(f"{meta['kernel'][:40]}_{meta['launch_index']}.npy", buffer, **meta)
    print(pool.summary())                                  # bytes used, lost, the size that holds everything

The interface (the `ikp record` runtime builds on it)::

    class Pool:
        @classmethod create(size_bytes=DEFAULT_POOL_BYTES, device="cuda", *, max_kernels=512,
                            default_selection="1") -> Pool
        @classmethod fake(address, size_bytes=DEFAULT_POOL_BYTES, *, max_kernels=512) -> Pool  # CPU compiles
        address: int; size_bytes: int; units: int; max_kernels: int
        kernel_id(name, meta=None) -> int      # at trace time, one per traced kernel (names may repeat)
        same_kernel(kernel_id, key) -> int     # at its end: the id of an earlier kernel of the same code, if any
                                               # (kernel_id is then given back); distinct code, distinct ids
        settled -> list[int]                   # the ids same_kernel answered, in order (one per traced kernel)
        kernels -> {id: name}
        select(kernel_id, selection) -> None   # "1" | "3:6" | "5:" | "every=100" | "last" | "none" | "all";
                                               # stream-ordered device ops (capturable in a CUDA graph)
        reset() -> None                        # empty the units and counters; selections and ids stay
        read() -> PoolContents                 # synchronizes; a numpy copy of the whole pool
        captures(contents=None) -> list[tuple[np.ndarray, dict]]   # (v1 buffer, sidecar meta) per launch
        summary(contents=None) -> dict         # bytes, used, lost, bytes_needed, per kernel launches seen / recorded
    trace_pipelines(pool, level=..., kernels=None)   # kernels: a regex on the kernel's name; others untouched

What is where: the layout is host_decode/core/wire.py's ("the recording pool"); the device's decision,
records and units are ikp_cute/pipelines/record_pool.py's; the reader is host_decode/load/pool.py (numpy
only, so `ikp` reads a raw dump of ``contents.words`` too).

Selections (per kernel id, decided on the device at each launch: they hold inside CUDA graphs and under
Nsight Compute's replays; a kernel's launches are counted on the device from the pool's creation): "N" the
N-th launch (0-based); "A:B" launches A <= i < B; "A:" from A on; "every=K" launches 0, K, 2K...; "all";
"none"; "last": every launch records, alternately into the two halves of a region the selection takes from
the top of the pool (``last_bytes``, a quarter of the pool by default), and the newest complete launch is
read back. A launch outside its selection runs the kernel's own code (pipelines/copies.py). Cost of a
selection, by construction: a window that is empty ("none", or one whose launches have passed) is decided
from one 16-byte line; a window still ahead or open (launches before "1", "every=K", "A:") also waits for
the kernel's launch counter; "last" records every launch.

Invariants a change could break (tests/unit/ikp_cute/test_pool.py guards them):
* every change of the control block is a stream-ordered device op: no host read, no sync, no copy from
  host memory (test_host_changes_are_device_ops);
* the control block a pool starts with is the one host_decode's reader expects (test_a_fresh_pool_reads_empty);
* one kernel id per distinct traced code: a re-trace of a kernel takes its id, the id it was handed is free
  again (test_a_kernel_of_known_code_takes_its_id; compiled: test_pool_compile.py::test_a_retrace_is_the_same_module,
  test_fa4_causal_and_not_are_two_kernels);
* a `last` region never overlaps units the shared area has handed out: a carve that would is recorded on the
  device as a region of 0 units (its launches count their records as lost), never written over
  (test_last_takes_its_region_from_the_top).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.core import wire

DEFAULT_POOL_BYTES = 32 << 20  # < 1% of the 5.67 GB IKET's sizing pass asked for quack's GEMM 8192^3


@dataclasses.dataclass
class PoolContents:
    """A host copy of a pool: its words and what the host knows of its kernels ({id: meta with "name"})."""

    words: np.ndarray  # uint64
    kernels: dict


class Pool:
    """The process's recording buffer (module docstring)."""

    def __init__(self, size_bytes: int, max_kernels: int, address: int, buffer=None, default_selection: str = "1",
                 last_bytes: int | None = None):
        wire.check_pool_geometry(size_bytes, max_kernels)
        self.size_bytes = int(size_bytes)
        self.max_kernels = int(max_kernels)
        self.units = wire.pool_units(size_bytes, max_kernels)
        self.control_bytes = wire.pool_control_bytes(max_kernels)
        self.address = int(address)
        self.buffer = buffer  # torch int64 tensor on the device, or None (a fake pool: compiles only)
        self.default_selection = default_selection
        wire.pool_selection(default_selection)  # refuse a bad default now
        half = (last_bytes if last_bytes is not None else size_bytes // 4) // (2 * wire.POOL_UNIT_BYTES)
        self.last_half_units = max(int(half), 1)
        self._names: list[str | None] = []  # by kernel id; None: an id given back (same_kernel), free again
        self._meta: list = []
        self._keys: dict[str, int] = {}  # fingerprint of a traced kernel's code -> its id (same_kernel)
        self.settled: list[int] = []  # the id each traced kernel ended its trace with (same_kernel), in order
        self._selections: dict[int, str] = {}
        self._regions: dict[int, tuple[int, int]] = {}  # kernel id -> (first unit, units per half)
        self._top = self.units  # units the shared area may hand out (host-side copy of TOP: only the host moves it)

    @classmethod
    def create(cls, size_bytes: int = DEFAULT_POOL_BYTES, device: str = "cuda", *,
               max_kernels: int = wire.POOL_DEFAULT_KERNELS, default_selection: str = "1",
               last_bytes: int | None = None) -> Pool:
        import torch

        wire.check_pool_geometry(size_bytes, max_kernels)
        buffer = torch.zeros(size_bytes // 8, dtype=torch.int64, device=device)
        pool = cls(size_bytes, max_kernels, int(buffer.data_ptr()), buffer, default_selection, last_bytes)
        control = torch.from_numpy(pool._control_block().view(np.int64))
        buffer[: control.numel()].copy_(control)  # at creation only (later changes are device ops)
        return pool

    @classmethod
    def fake(cls, address: int, size_bytes: int = DEFAULT_POOL_BYTES, *,
             max_kernels: int = wire.POOL_DEFAULT_KERNELS, default_selection: str = "1") -> Pool:
        """A pool with no buffer, for compiling on a CPU (CI, dry runs): kernels bake `address`."""
        return cls(size_bytes, max_kernels, address, None, default_selection)

    def _control_block(self) -> np.ndarray:
        """The control block a pool starts with: header, every kernel's default window, empty counters."""
        block = np.zeros(self.control_bytes // 4, np.uint32)
        block[:8] = wire.pool_header_words(self.size_bytes, self.max_kernels)
        start, stop, every, mode = wire.pool_selection(self.default_selection)
        windows = block[wire.POOL_WINDOWS // 4 : wire.pool_windows_end(self.max_kernels) // 4].reshape(-1, 4)
        windows[:] = (start, stop, every, mode)
        for k in range(self.max_kernels):
            for s in range(3):
                block[wire.pool_set(self.max_kernels, k, s, wire.POOL_SET_LOSS_MIN) // 4] = 0xFFFFFFFF
        return block

    # --- kernels and selections ------------------------------------------------------------------------

    def kernel_id(self, name: str, meta=None) -> int:
        """An id for a kernel being traced: the lowest free one (its code decides at the end of its trace whether
        it keeps it: same_kernel). `meta`: sidecar keys for its captures (a dict, or a callable giving one at
        read time)."""
        free = self._names.index(None) if None in self._names else len(self._names)
        if free >= self.max_kernels:
            raise RuntimeError(f"the pool holds {self.max_kernels} kernels (Pool.create(max_kernels=...)); "
                               f"kernel {name!r} cannot be traced into it")
        if free == len(self._names):
            self._names.append(None)
            self._meta.append(None)
        self._names[free], self._meta[free] = str(name), meta
        return free

    def same_kernel(self, kernel_id: int, key: str) -> int:
        """At the end of kernel `kernel_id`'s trace, `key` the fingerprint of its final code: the id of the kernel
        traced before with the same code, `kernel_id` then given back (free for the next kernel_id); else
        `kernel_id`, remembered under `key`. A program that calls a jit function in a loop traces its kernel at
        every call: the DSL's JIT cache serves the first compile, which counts all their launches under one id;
        the same kernel compiled with other compile-time arguments (FA4 causal or not) is other code, another
        id."""
        if not 0 <= kernel_id < len(self._names) or self._names[kernel_id] is None:
            raise ValueError(f"pool.same_kernel: kernel id {kernel_id!r} was not handed out by kernel_id")
        known = self._keys.setdefault(key, kernel_id)
        if known != kernel_id:
            self._names[kernel_id] = self._meta[kernel_id] = None
            while self._names and self._names[-1] is None:
                self._names.pop()
                self._meta.pop()
        self.settled.append(known)
        return known

    @property
    def kernels(self) -> dict[int, str]:
        return {k: name for k, name in enumerate(self._names) if name is not None}

    def select(self, kernel_id: int, selection: str) -> None:
        """Which launches of kernel `kernel_id` record, from its next launch on (module docstring)."""
        if not isinstance(kernel_id, int) or not 0 <= kernel_id < self.max_kernels:
            raise ValueError(f"pool.select: kernel id {kernel_id!r} outside 0..{self.max_kernels - 1}")
        words = wire.pool_selection(selection)
        self._selections[kernel_id] = selection
        self._write_window(kernel_id, words)

    def _write_window(self, k: int, words: tuple) -> None:
        if words[3] == wire.POOL_LAST:
            self._carve(k)
        for i, value in enumerate(words):
            self._set32(wire.pool_window(k) // 4 + i, value)

    def _carve(self, k: int) -> None:
        """Give kernel k its `last` region (two halves of last_half_units) from the top of the shared area, or
        reset the halves of the one it has. Device ops only: the region is recorded as 0 units when the shared
        area has already handed out units it would cover."""
        half = self.last_half_units
        if k not in self._regions:
            if self._top < 2 * half:
                raise RuntimeError(f"pool.select({k}, 'last'): {self._top} units left for a region of 2 x {half}; "
                                   "create the pool larger or with a smaller last_bytes")
            self._top -= 2 * half
            self._regions[k] = (self._top, half)
            self._set32(wire.POOL_HEADER_WORDS32["top"], self._top)
            self._set32(wire.pool_counter(self.max_kernels, k, wire.POOL_LAST_FIRST) // 4, self._top)
            if self.buffer is not None:
                import torch

                fits = (self.buffer[wire.POOL_NEXT // 8] <= self._top).to(torch.int32) * half
                self._words32()[wire.pool_counter(self.max_kernels, k, wire.POOL_LAST_HALF) // 4].copy_(fits)
        for s in wire.POOL_LAST_SETS:
            self._reset_set(k, s)

    def _reset_set(self, k: int, s: int) -> None:
        base = wire.pool_set(self.max_kernels, k, s) // 4
        for i in range(wire.POOL_SET_LOSS_MIN // 4):
            self._set32(base + i, 0)
        self._set32(base + wire.POOL_SET_LOSS_MIN // 4, 0xFFFFFFFF)
        self._set32(base + wire.POOL_SET_LOSS_MAX // 4, 0)

    def _words32(self):
        import torch

        return self.buffer.view(torch.int32)

    def _set32(self, index: int, value: int) -> None:
        """One 32-bit word of the control block, as a device op (fill_: stream-ordered, capturable)."""
        if self.buffer is None:
            return
        value &= 0xFFFFFFFF
        self._words32()[index].fill_(value - (1 << 32) if value >= 1 << 31 else value)

    def reset(self) -> None:
        """Empty the pool (units, NEXT, launch counts, losses) as device ops; kernel ids, selections and
        `last` regions stay. Windows the device emptied (past launches) are set again from the selections."""
        if self.buffer is None:
            return
        import torch

        control = self.control_bytes // 8
        counters = wire.pool_counters(self.max_kernels) // 8
        self.buffer[control:].zero_()
        self.buffer[counters:control].zero_()
        self.buffer[wire.POOL_NEXT // 8].zero_()
        per_kernel = self.buffer[counters : counters + self.max_kernels * wire.POOL_COUNTER_BYTES // 8]
        per_kernel = per_kernel.view(torch.int32).view(self.max_kernels, wire.POOL_COUNTER_BYTES // 4)
        for s in range(3):
            per_kernel[:, (wire.POOL_SETS + wire.POOL_SET_BYTES * s + wire.POOL_SET_LOSS_MIN) // 4].fill_(-1)
        for k in range(max(len(self._names), max(self._selections, default=-1) + 1)):
            self._write_window(k, wire.pool_selection(self._selections.get(k, self.default_selection)))
        for k, (first, half) in self._regions.items():
            self._set32(wire.pool_counter(self.max_kernels, k, wire.POOL_LAST_FIRST) // 4, first)
            self._set32(wire.pool_counter(self.max_kernels, k, wire.POOL_LAST_HALF) // 4, half)

    # --- reading -----------------------------------------------------------------------------------------

    def read(self) -> PoolContents:
        """Synchronize the pool's device and copy the whole pool to the host."""
        if self.buffer is None:
            raise RuntimeError("a fake pool (Pool.fake) has no buffer to read")
        import torch

        if self.buffer.is_cuda:
            torch.cuda.synchronize(self.buffer.device)
        words = self.buffer.cpu().numpy().view(np.uint64)
        return PoolContents(words, self.kernel_meta())

    def kernel_meta(self) -> dict[int, dict]:
        """{kernel id: sidecar keys for its captures}: its name as "kernel" key's source, and its trace's meta."""
        out = {}
        for k, (name, meta) in enumerate(zip(self._names, self._meta)):
            if name is None:
                continue
            extra = meta() if callable(meta) else dict(meta or {})
            out[k] = dict(extra, name=name)
        return out

    def captures(self, contents: PoolContents | None = None) -> list[tuple[np.ndarray, dict]]:
        """One (v1 buffer, sidecar meta) per recorded (kernel, launch) (host_decode.load.pool.read_pool)."""
        from host_decode.load.pool import read_pool

        contents = contents if contents is not None else self.read()
        return read_pool(contents.words, contents.kernels, source="pool").captures

    def summary(self, contents: PoolContents | None = None) -> dict:
        """The pool's counts (host_decode.load.pool.read_pool's summary)."""
        from host_decode.load.pool import read_pool

        contents = contents if contents is not None else self.read()
        return read_pool(contents.words, contents.kernels, source="pool").summary

    def __repr__(self) -> str:
        return (f"Pool({self.size_bytes} bytes at {self.address:#x}, {self.units} units, "
                f"{len(self.kernels)} kernels{', fake' if self.buffer is None else ''})")
