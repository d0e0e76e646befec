"""Recording folders built by hand for tests of host_decode.reports.recording: a process folder holding a
manifest (host_decode.load.recording) and captures copied from committed ones (the FA4 and quack pipeline
captures of examples/pipelines), as a recording process leaves them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from host_decode.load.capture import save_capture
from host_decode.load.recording import MANIFEST_FORMAT, manifest_text

ROOT = Path(__file__).resolve().parents[2]
FA4 = ROOT / "examples" / "pipelines" / "fa4_sm90_signals.npy"
QUACK = ROOT / "examples" / "pipelines" / "quack_gemm_sm90_signals.npy"
FA4_KERNEL = "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__tensor0_0"
QUACK_KERNEL = "kernel_cutlass_kernel_quackgemm_default_epiGemmDefaultSm90_object_at__TiledMMA_0"


def copy_capture(template: Path, dest: Path, kernel: str, launch_index: int) -> None:
    meta = json.loads(template.with_suffix(".json").read_text())
    names = {k: meta.pop(k) for k in ("events", "groups") if k in meta}
    meta.pop("format", None)
    meta.update(kernel=kernel, launch_index=launch_index)
    save_capture(dest, np.load(template, allow_pickle=False), names, **meta)


def kernel_entry(name: str, short: str, kid: int, selection: str = "1", traced: bool = True, **extra) -> dict:
    reason = "" if traced else extra.pop("reason", "not matched by --kernels (compiled untouched)")
    return dict({"name": name, "short": short, "kernel_id": kid, "traced": traced, "reason": reason,
                 "selection": selection if traced else None, "selection_words": "launch 1 (the 2nd)",
                 "rule": "default", "compiles": 1, "host_launches": 10, "function": short}, **extra)


def process_folder(root: Path, tag: str = "pid100", *, status: str = "complete", fa4_launches=(1,),
                   quack_launches=(1,), pool: dict | None = None, untraced=(), kernels=None, rank=None) -> Path:
    """A process folder: FA4 and quack captures at the given launch indices, and a manifest."""
    folder = root / tag
    captures = []
    for template, kernel, short, launches in ((FA4, FA4_KERNEL, "flash_fwd", fa4_launches),
                                              (QUACK, QUACK_KERNEL, "gemm", quack_launches)):
        for i in launches:
            rel = f"captures/{short}/launch_{i:06d}.npy"
            copy_capture(template, folder / rel, kernel, i)
            captures.append({"path": rel, "kernel": kernel, "launch_index": i})
    if kernels is None:
        kernels = [kernel_entry(FA4_KERNEL, "flash_fwd", 0), kernel_entry(QUACK_KERNEL, "gemm", 1)]
    if pool is None:
        pool = {"bytes": 1 << 28, "used": 2 * 196744, "lost": 0, "needed": 2 * 196744,
                "kernels": {FA4_KERNEL: {"launches_seen": 10, "launches_recorded": len(fa4_launches),
                                         "launches_lost": 0},
                            QUACK_KERNEL: {"launches_seen": 10, "launches_recorded": len(quack_launches),
                                           "launches_lost": 0}}}
    manifest = {"format": MANIFEST_FORMAT, "status": status, "config": {"out": str(root)}, "pid": 100,
                "rank": rank, "argv": ["train.py", "--steps", "10"], "device": "NVIDIA H200", "pool": pool,
                "kernels": kernels, "untraced": list(untraced), "caches": [], "captures": captures, "errors": []}
    (folder / "record.json").write_text(manifest_text(manifest))
    return folder
