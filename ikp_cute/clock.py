"""A GPU's %globaltimer against the host's CLOCK_REALTIME, measured at capture time (docs/flags.md, "Clocks").

``measure_offset(device)`` launches a one-thread kernel that reads %globaltimer, between two host clock reads,
many times; the narrowest bracket wins: offset = its midpoint - the GPU's reading (ns to add to that GPU's
%globaltimer to get host CLOCK_REALTIME), error = half its width (the kernel's read happened inside the
bracket, so the offset is right within that error whatever the launch latency split). Two GPUs of one host
measured this way share the host clock: their captures' offsets put both on it, and the sum of the two errors
bounds the error of one against the other (host_decode.analysis.flags.match_waits, clock_error_ns).

Invariants a change could break (tests/unit/ikp_cute/test_flags_buffers.py guards them): the narrowest bracket
is chosen and its half width is the error; the probe kernel compiles to one %globaltimer read and one 64-bit
store.
"""

from __future__ import annotations

import socket
import time

from cutlass import Int64, cute

SAMPLES = 200
_COMPILED: dict = {}


@cute.kernel
def read_globaltimer(out: cute.Tensor):
    out[0] = Int64(cute.arch.globaltimer())


@cute.jit
def launch_read(out: cute.Tensor):
    read_globaltimer(out).launch(grid=[1, 1, 1], block=[1, 1, 1])


def best_bracket(samples) -> tuple[int, int]:
    """(offset_ns, error_ns) from (host_before, gpu, host_after) samples: the narrowest bracket's midpoint minus
    its GPU reading, and half its width (rounded up)."""
    rows = [(int(a), int(g), int(b)) for a, g, b in samples]
    if not rows:
        raise ValueError("best_bracket: no samples")
    bad = [r for r in rows if r[2] < r[0]]
    if bad:
        raise ValueError(f"best_bracket: a sample ends before it begins: {bad[0]}")
    before, gpu, after = min(rows, key=lambda r: r[2] - r[0])
    return (before + after) // 2 - gpu, (after - before + 1) // 2


def measure_offset(device=None, samples: int = SAMPLES) -> tuple[int, int]:
    """(offset_ns, error_ns) of `device`'s %globaltimer against this host's CLOCK_REALTIME (module docstring):
    host time = %globaltimer + offset_ns, within error_ns. Needs the GPU (and compiles the probe once)."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"ikp_cute.clock.measure_offset: {device} is not a GPU")
    with torch.cuda.device(device):
        out = torch.zeros(1, dtype=torch.int64, device=device)
        view = from_dlpack(out, assumed_align=8)
        key = device.index
        if key not in _COMPILED:
            _COMPILED[key] = cute.compile(launch_read, view)
        run = _COMPILED[key]
        run(view)  # warm: the first launch loads the module
        torch.cuda.synchronize(device)
        rows = []
        for _ in range(samples):
            before = time.clock_gettime_ns(time.CLOCK_REALTIME)
            run(view)
            torch.cuda.synchronize(device)
            after = time.clock_gettime_ns(time.CLOCK_REALTIME)
            rows.append((before, int(out.item()), after))
    return best_bracket(rows)


def reference() -> str:
    return f"host CLOCK_REALTIME of {socket.gethostname()}"


def sidecar_keys(device=None) -> dict:
    """The sidecar's clock keys (clock_offset_ns, clock_error_ns, clock_reference), measured now."""
    offset, error = measure_offset(device)
    return {"clock_offset_ns": offset, "clock_error_ns": error, "clock_reference": reference()}


__all__ = ["best_bracket", "measure_offset", "reference", "sidecar_keys"]
