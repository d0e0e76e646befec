"""Host session: owns the profile buffer (torch, on the GPU), the compile-time spec and the names.

torch is imported when a Session with a buffer is built, never at ``import ikp_cute``.

Buffer: int64[spec.total_slots] = the v1 buffer (header + write_stride * records_per_lane slots), which is
what is saved and decoded, then the stray-record word (stray_records(), also written to the sidecar).
``reset()`` zeroes it and pre-writes the header from the session's geometry; the kernel's block 0 leader rewrites the
header from the launched grid, so a grid that differs from the session is visible to the decoder.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from host_decode.core import wire
from host_decode.core.model import Names

from .spec import ProfileSpec

FORMAT = "ikp-v1"
NEEDS_GPU = ("needs a CUDA GPU ({why}); without one, compile kernels for an architecture you choose: "
             "CUTE_DSL_ARCH=sm_90a and cute.compile(...) (docs/getting-started.md)")


class GpuUnavailable(RuntimeError):
    """A Session on a machine without a CUDA GPU: the message (one line) says what it needs and what works
    without one. tests/unit/ikp_cute/test_no_gpu_messages.py"""


def gpu_problem(device: str = "cuda") -> str | None:
    """Why torch cannot use the CUDA `device` here (None when it can, or when `device` is not CUDA)."""
    if not str(device).startswith("cuda"):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return (f"torch {torch.__version__} is a CPU build" if torch.version.cuda is None
            else "torch sees no CUDA device")


def require_gpu(what: str) -> None:
    """For scripts (the examples' run.py): exit with one line saying `what` needs a CUDA GPU when there is none."""
    why = gpu_problem()
    if why:
        raise SystemExit(f"{what} {NEEDS_GPU.format(why=why)}")


class Session:
    """One instrumented kernel's profile buffer, its spec and the names of its groups.

        spec = ikp_cute.ProfileSpec(num_groups=2, num_blocks=528, records_per_lane=1024)
        session = ikp_cute.Session(spec, groups=["producer", "consumer"])
        compiled = cute.compile(launch, x, session.kernel_arg(), session.spec)
        with session.zeroed_then_synced():      # zero the buffer; on exit, synchronize the device
            compiled(x, session.kernel_arg())
        trace = session.decode()

    spec:          the ProfileSpec (geometry, mode, events); ``session.spec`` is what kernels compile
                   with (the same object, or a copy carrying the baked address).
    groups:        names of the spec's groups (default group_0 ...); len(groups) == spec.num_groups.
    bake_address:  compile the buffer address into the kernel (pass None as the kernel's buffer).
    kernel:        a name for the sidecar.
    A disabled spec (``ikp_cute.disabled()`` or ``enabled=False``) has no buffer.
    """

    def __init__(
        self,
        spec: ProfileSpec,
        groups: Sequence[str] | None = None,
        *,
        device: str = "cuda",
        bake_address: bool = False,
        kernel: str | None = None,
    ):
        if not isinstance(spec, ProfileSpec):
            raise TypeError(
                f"Session(spec, ...): spec must be an ikp_cute.ProfileSpec (got {type(spec).__name__}); "
                "build it with ikp_cute.ProfileSpec(num_groups=..., num_blocks=..., records_per_lane=...)"
            )
        self.group_names = _group_names(groups, spec.num_groups)
        self.kernel = kernel
        self.device = device
        self.buffer = None
        self._arg = None
        self.ring = None  # the launch ring of a spec with window_slots (ikp_cute/ring.py)
        if not spec.enabled:
            self.spec = spec
            return
        why = gpu_problem(device)
        if why:
            raise GpuUnavailable(f"ikp_cute.Session {NEEDS_GPU.format(why=why)}")
        import torch

        self.buffer = torch.zeros(spec.buffer_slots, dtype=torch.int64, device=device)
        self.spec = dataclasses.replace(spec, baked_address=int(self.buffer.data_ptr())) if bake_address else spec
        if spec.window_slots:  # capture windows + launch ring (ikp_cute/ring.py): closed until asked
            from .ring import Ring

            self.ring = Ring(self)
            self.ring.close()
        self.reset()

    # --- launching -----------------------------------------------------------------------------------

    def kernel_arg(self):
        """What to pass as the kernel's buffer argument: a CuTe tensor view of the buffer, or None when
        disabled or baked (then the kernel has no buffer parameter at all)."""
        if not self.spec.enabled or self.spec.baked_address is not None:
            return None
        if self._arg is None:
            from cutlass.cute.runtime import from_dlpack

            self._arg = from_dlpack(self.buffer, assumed_align=16)
        return self._arg

    def reset(self) -> None:
        """Zero the buffer (empty slot = 0, no stray records) and pre-write the header; before every launch."""
        if self.buffer is None:
            return
        if self.ring is not None:
            self.ring.arm()
            return
        self.buffer.zero_()
        self.buffer[0] = wire.pack_header(self.spec.num_blocks, self.spec.num_groups)

    @contextlib.contextmanager
    def zeroed_then_synced(self):
        """``with session.zeroed_then_synced(): launch(...)``: reset() on entry, device synchronize on exit,
        so the buffer is ready to read after the block."""
        self.reset()
        yield self
        if self.buffer is not None and self.buffer.is_cuda:
            import torch

            torch.cuda.synchronize(self.buffer.device)

    def __enter__(self):
        raise TypeError("`with session:` is gone: use `with session.zeroed_then_synced():` (zeroes, then synchronizes)")

    def __exit__(self, *exc):  # pragma: no cover - __enter__ always raises
        return False

    # --- results -------------------------------------------------------------------------------------

    # --- capture windows (spec.window_slots > 0; ikp_cute/ring.py) ----------------------------------

    def window(self, start: int, count: int, every: int = 1, relative: bool = False) -> None:
        """Record launches start, start+every, ... (count of them); launch indices count every launch
        (relative=True: from the next launch on). See ikp_cute/ring.py."""
        self._ring().window(start, count, every, relative)

    def record_while(self):
        """``with session.record_while(): ...`` records the launches issued inside the block."""
        return self._ring().record_while()

    def launches(self):
        """[(launch index, v1 records, stray)] of every recorded launch in the ring (synchronizes)."""
        return self._ring().launches()

    def _ring(self):
        if self.ring is None:
            raise RuntimeError("capture windows need a spec with window_slots > 0 (ProfileSpec(window_slots=R))")
        return self.ring

    def meta_for_slot(self, stray: int) -> dict:
        meta = self.meta()
        meta["stray_records"] = stray
        return meta

    def records(self) -> np.ndarray:
        """The v1 part of the buffer as uint64 (copied to the host)."""
        if self.buffer is None:
            raise RuntimeError("this Session is disabled: there is no buffer")
        self._single_launch("records()")
        return self.buffer[: self.spec.v1_slots].cpu().numpy().view(np.uint64)

    def _single_launch(self, call: str) -> None:
        if self.ring is not None:
            raise RuntimeError(
                f"session.{call}: this session records a ring of launches (window_slots={self.spec.window_slots}); "
                "use session.ring.decode() / session.ring.save(DIR) / session.launches()"
            )

    def stray_records(self) -> int:
        """Records of threads that claimed a lane that does not exist (a runtime group= outside
        0..num_groups-1, a block past write_stride): never written, counted here. With a window they are
        counted in the ring's STRAY word (their launch is not known; ikp_cute/ring.py), added to any
        per-slot count."""
        if self.buffer is None:
            raise RuntimeError("this Session is disabled: there is no buffer")
        if self.ring is not None:
            state = self.ring.state()
            per_slot = sum(stray for _, _, stray in self.ring.launches(state))  # checks the control block first
            return state["stray_records"] + per_slot
        return int(self.buffer[self.spec.stray_slot].item())

    def dropped_on_device(self) -> int:
        """Sum of the DROPPED instants' counts (records the device could not store)."""
        timer, _, event_id, event_type = wire.unpack_records(self.records()[1:])
        mask = (event_id == wire.DROPPED_EVENT_ID) & (event_type == int(wire.EventType.INSTANT))
        return int(timer[mask].astype(np.int64).sum())

    def names(self) -> Names:
        return Names(events=self.spec.events.as_dict(), groups=dict(enumerate(self.group_names)))

    def meta(self) -> dict:
        meta = {
            "format": FORMAT,
            "write_stride": self.spec.write_stride,
            "records_per_lane": self.spec.records_per_lane,
            "num_blocks": self.spec.num_blocks,
            "num_groups": self.spec.num_groups,
            "mode": self.spec.mode,
            "fence": self.spec.fence,
        }
        if self.buffer is not None and self.ring is None:
            meta["stray_records"] = self.stray_records()
        if self.kernel:
            meta["kernel"] = self.kernel
        meta.update(_device_facts(self.buffer))
        return meta

    def decode(self):
        """-> host_decode Trace of the last launch."""
        from host_decode.core.decoder import decode

        self._single_launch("decode()")
        stray = self.stray_records()
        if stray:
            import warnings

            warnings.warn(f"{stray} records came from threads whose lane does not exist (group= out of range or "
                          "a grid larger than the spec): not written, counted in meta['stray_records']", stacklevel=2)
        return decode(
            self.records(),
            names=self.names(),
            write_stride=self.spec.write_stride,
            meta=self.meta(),
        )

    def save(self, path: str | Path) -> Path:
        """Write BUFFER.npy + BUFFER.json (names, geometry, device) via host_decode.load.capture."""
        from host_decode.load.capture import save_capture

        self._single_launch("save()")
        meta = self.meta()
        meta.pop("format", None)  # save_capture writes the format key itself
        return save_capture(path, self.records(), self.names(), **meta)


def _group_names(groups, num_groups: int) -> list[str]:
    if groups is None:
        return [f"group_{i}" for i in range(num_groups)]
    if isinstance(groups, str):
        raise TypeError(f"groups={groups!r}: expected a list of names, one per group")
    names = [str(g) for g in groups]
    if len(names) != num_groups:
        raise ValueError(f"groups: {len(names)} names {names} for a spec with num_groups={num_groups}")
    if len(set(names)) != len(names):
        raise ValueError(f"groups: duplicate names in {names}")
    return names


def _device_facts(buffer) -> dict:
    if buffer is None or not buffer.is_cuda:
        return {}
    import torch

    props = torch.cuda.get_device_properties(buffer.device)
    return {"device": props.name, "sm_count": int(props.multi_processor_count)}


def fake_buffer(spec: ProfileSpec):
    """A CuTe fake tensor shaped like the session buffer, for compiling without a GPU (CI); None when the
    spec is disabled or baked (the kernel then takes no buffer argument)."""
    if not spec.enabled or spec.baked_address is not None:
        return None
    from cutlass import Int64
    from cutlass.cute.runtime import make_fake_compact_tensor

    return make_fake_compact_tensor(Int64, (spec.buffer_slots,), assumed_align=16)
