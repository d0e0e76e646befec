"""Host session: owns the profile buffer (torch, on the GPU), the compile-time spec and the names.

torch is imported when a Session with a buffer is built, never at ``import ikp_cute``.

Buffer: int64[spec.total_slots] = the v1 buffer (header + write_stride * records_per_lane slots), which is
what is saved and decoded. ``reset()`` zeroes it and pre-writes the header from the session's geometry; the kernel's block 0 leader rewrites the
header from the launched grid, so a grid that differs from the session is visible to the decoder.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from host_decode.core import wire
from host_decode.core.model import Names

from .spec import EventRegistry, ProfileSpec

FORMAT = "ikp-v1"


class Session:
    """One instrumented kernel's profile buffer + spec.

    groups:            names of the lane groups per block (e.g. ["producer", "consumer"]) or a count.
    num_blocks:        blocks of the launch (persistent kernels: the number of CTAs launched).
    records_per_lane:  slots per lane incl. 2 anchors + 2 trailer; user capacity = records_per_lane - 4.
    write_stride:      default num_blocks * num_groups.
    mode:              "cursor" (default), "atomic" or "static".
    events:            names (ids 0, 1, ... in order) or {name: id} to pin ids; others get ids on first use.
    warps_per_group:   the default leader of group g is lane 0 of warp g * warps_per_group.
    fence:             "none" (default) or "cta" (block fence after each begin, before each end).
    bake_address:      compile the buffer address into the kernel (pass None as the kernel's buffer).
    defer_begin:       cursor mode: write a region's begin record at its end (off by default; see ProfileSpec).
    lean:              cursor mode: no profiler state held in registers between records (see ProfileSpec).
    stage:             cursor mode: "global" (default) or "smem" (records staged in shared memory,
                       copied out by finalize(); see ProfileSpec).
    enabled:           False: no buffer; every profiling call compiles away.
    """

    def __init__(
        self,
        groups: Sequence[str] | int = 1,
        num_blocks: int = 1,
        records_per_lane: int = 256,
        write_stride: int | None = None,
        mode: str = "cursor",
        enabled: bool = True,
        device: str = "cuda",
        events: Iterable[str] | Mapping[str, int] | None = None,
        warps_per_group: int = 4,
        fence: str = "none",
        bake_address: bool = False,
        kernel: str | None = None,
        defer_begin: bool = False,
        stage: str = "global",
        lean: bool = False,
    ):
        self.group_names = _group_names(groups)
        num_groups = len(self.group_names)
        self.kernel = kernel
        self.device = device
        self.buffer = None
        geometry = {
            "mode": mode,
            "num_groups": num_groups,
            "num_blocks": num_blocks,
            "write_stride": write_stride if write_stride is not None else num_blocks * num_groups,
            "records_per_lane": records_per_lane,
            "warps_per_group": warps_per_group,
            "fence": fence,
            "events": EventRegistry(events),
            "defer_begin": defer_begin,
            "stage": stage,
            "lean": lean,
        }
        probe = ProfileSpec(enabled=enabled, **geometry)  # validates before allocating anything
        if enabled:
            import torch

            self.buffer = torch.zeros(probe.total_slots, dtype=torch.int64, device=device)
        address = int(self.buffer.data_ptr()) if (enabled and bake_address) else None
        self.spec = ProfileSpec(enabled=enabled, baked_address=address, **geometry) if address else probe
        self._arg = None
        if enabled:
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
        """Zero the buffer (empty slot = 0) and pre-write the header; call before every launch."""
        if self.buffer is None:
            return
        self.buffer.zero_()
        self.buffer[0] = wire.pack_header(self.spec.num_blocks, self.spec.num_groups)

    def __enter__(self):
        self.reset()
        return self

    def __exit__(self, *exc) -> bool:
        if self.buffer is not None and self.buffer.is_cuda:
            import torch

            torch.cuda.synchronize(self.buffer.device)
        return False

    # --- results -------------------------------------------------------------------------------------

    def records(self) -> np.ndarray:
        """The v1 part of the buffer as uint64 (copied to the host)."""
        if self.buffer is None:
            raise RuntimeError("this Session is disabled: there is no buffer")
        return self.buffer[: self.spec.v1_slots].cpu().numpy().view(np.uint64)

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
            "stage": self.spec.stage,
        }
        if self.kernel:
            meta["kernel"] = self.kernel
        meta.update(_device_facts(self.buffer))
        return meta

    def decode(self):
        """-> host_decode Trace of the last launch."""
        from host_decode.core.decoder import decode

        return decode(
            self.records(),
            names=self.names(),
            write_stride=self.spec.write_stride,
            meta=self.meta(),
        )

    def save(self, path: str | Path) -> Path:
        """Write BUFFER.npy + BUFFER.json (names, geometry, device) via host_decode.core.capture."""
        from host_decode.core.capture import save_capture

        meta = self.meta()
        meta.pop("format", None)  # save_capture writes the format key itself
        return save_capture(path, self.records(), self.names(), **meta)


def _group_names(groups) -> list[str]:
    if isinstance(groups, int):
        if groups < 1:
            raise ValueError(f"groups={groups}: need at least one group per block")
        return [f"group_{i}" for i in range(groups)]
    names = [str(g) for g in groups]
    if not names:
        raise ValueError("groups: need at least one group name")
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

    return make_fake_compact_tensor(Int64, (spec.total_slots,), assumed_align=16)
