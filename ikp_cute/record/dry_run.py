"""A dry run (`ikp record --dry-run --arch sm_90a -- python prog.py`): the program's kernels are compiled for
an architecture on a machine without a GPU, traced as a recording would trace them, and never launched.

What stands in for the GPU, for the program's process (set before the program runs):
* the environment: CUTE_DSL_ARCH (the DSL compiles for it), QUACK_ARCH, FLASH_ATTENTION_ARCH and
  FLASH_ATTENTION_NUM_SMS (FA4 and quack pick their kernels by it), and ENV_DRY_RUN (= the architecture) for
  programs that want a path of their own (skip a numerics check, print no timing);
* torch: every tensor is a fake one (a global FakeTensorMode: shapes, dtypes and devices, no data), and
  torch.cuda answers device questions as the architecture's GPU would (capability, SM count, properties;
  synchronize does nothing);
* cutlass.utils.HardwareInfo (persistent schedulers ask it for SMs and active clusters) answers likewise;
* launches of compiled CuTe DSL functions are intercepted and skipped (hooks.py), and counted.
A program that reads tensor values (``.item()``, printing results) cannot run on fake tensors: it fails
there, after the kernels compiled before that point are reported.

Facts used: examples/pipelines/compile_cpu.py (FA4 and quack compile on a CPU this way), docs/cute_dsl.md.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types

from host_decode.load.recording import ENV_DRY_RUN

FAKE_POOL_ADDRESS = 0x7F0012340000  # where a dry run's fake pool "is": baked into the compiled kernels


@dataclasses.dataclass(frozen=True)
class Arch:
    name: str
    capability: tuple
    sm_count: int
    gpu: str
    l2_bytes: int


ARCHES = {
    "sm_90a": Arch("sm_90a", (9, 0), 132, "H100/H200 (dry run, sm_90a)", 50 << 20),
    "sm_100a": Arch("sm_100a", (10, 0), 148, "B200 (dry run, sm_100a)", 126 << 20),
}


def environment(arch: str) -> dict:
    """Environment variables of a dry run for `arch` (the parent passes them; start() sets missing ones)."""
    a = ARCHES[arch]
    return {"CUTE_DSL_ARCH": a.name, "QUACK_ARCH": a.name, "FLASH_ATTENTION_ARCH": a.name[:-1],
            "FLASH_ATTENTION_NUM_SMS": str(a.sm_count), ENV_DRY_RUN: a.name}


class FakeHardwareInfo:
    """cutlass.utils.HardwareInfo as the dry run's GPU answers."""

    arch: Arch = ARCHES["sm_90a"]

    def __init__(self, device_id: int = 0, *args, **kwargs):
        self.device_id = device_id

    def get_device_multiprocessor_count(self) -> int:
        return self.arch.sm_count

    def get_max_active_clusters(self, cluster_size: int = 1) -> int:
        return self.arch.sm_count // max(1, int(cluster_size))

    def get_l2_cache_size_in_bytes(self) -> int:
        return self.arch.l2_bytes


class DryRun:
    """The stand-ins of one dry run (see the module docstring); `start` before the program runs."""

    def __init__(self, arch: str):
        if arch not in ARCHES:
            raise ValueError(f"dry run: architecture {arch!r}; expected one of {sorted(ARCHES)}")
        self.arch = ARCHES[arch]
        self.fake_mode = None
        self.notes: list[str] = []
        self.saved: list[tuple] = []  # (owner, attribute, value before): restored by stop()
        self.env_set: list[str] = []

    def start(self) -> None:
        for name, value in environment(self.arch.name).items():
            if name not in os.environ:
                os.environ[name] = value
                self.env_set.append(name)
        try:
            import torch
        except ImportError:
            self.notes.append("torch is not installed: no fake tensors")
            return
        self.patch_torch(torch)
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.fake_mode.__enter__()

    def patch_torch(self, torch) -> None:
        a = self.arch
        props = types.SimpleNamespace(multi_processor_count=a.sm_count, major=a.capability[0],
                                      minor=a.capability[1], name=a.gpu, total_memory=1 << 37,
                                      shared_memory_per_block_optin=232448, L2_cache_size=a.l2_bytes)
        stand_ins = {
            "get_device_properties": lambda device=None: props,
            "get_device_capability": lambda device=None: a.capability,
            "get_device_name": lambda device=None: a.gpu,
            "current_device": lambda: 0,
            "device_count": lambda: 1,
            "is_available": lambda: True,
            "synchronize": lambda device=None: None,
            "set_device": lambda device: None,
        }
        for name, value in stand_ins.items():
            self.replace(torch.cuda, name, value)

    def replace(self, owner, name: str, value) -> None:
        self.saved.append((owner, name, getattr(owner, name, None)))
        setattr(owner, name, value)

    def on_cutlass(self) -> None:
        """cutlass was imported: its HardwareInfo answers as the architecture's GPU."""
        FakeHardwareInfo.arch = self.arch
        for name in ("cutlass.utils", "cutlass.utils.hardware_info"):
            module = sys.modules.get(name)
            if module is None:
                try:
                    import importlib

                    module = importlib.import_module(name)
                except ImportError:
                    continue
            self.replace(module, "HardwareInfo", FakeHardwareInfo)

    def stop(self) -> None:
        """Undo the stand-ins (a recording inside a longer process, and tests)."""
        if self.fake_mode is not None:
            try:
                self.fake_mode.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the program left modes of its own on top: nothing to undo
                pass
            self.fake_mode = None
        for owner, name, value in reversed(self.saved):
            setattr(owner, name, value)
        self.saved.clear()
        for name in self.env_set:
            os.environ.pop(name, None)
        self.env_set.clear()
