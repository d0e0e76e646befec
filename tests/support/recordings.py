"""Recording folders built by hand for tests of host_decode.reports.recording: a process folder holding a
manifest (host_decode.load.recording) and captures copied from committed ones (the FA4 and quack pipeline
captures of examples/pipelines), as a recording process leaves them, the pool's summary in the form
host_decode.load.pool.read_pool gives it."""

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
CAPTURE_BYTES = 196744


def copy_capture(template: Path, dest: Path, kernel: str, kernel_id: int, launch_index: int) -> None:
    meta = json.loads(template.with_suffix(".json").read_text())
    names = {k: meta.pop(k) for k in ("events", "groups") if k in meta}
    meta.pop("format", None)
    meta.update(kernel=kernel, launch_index=launch_index, pool={"kernel_id": kernel_id})
    save_capture(dest, np.load(template, allow_pickle=False), names, **meta)


def kernel_entry(name: str, short: str, kid: int | None, selection: str = "1", traced: bool = True, *,
                 compile: int = 1, label: str | None = None, host_launches: int = 10, **extra) -> dict:
    reason = "" if traced else extra.pop("reason", "not matched by --kernels (compiled untouched)")
    return dict({"name": name, "short": short, "label": label or short, "compile": compile, "arguments": {},
                 "kernel_id": kid if traced else None, "traced": traced, "reason": reason,
                 "selection": selection if traced else None, "selection_words": "launch 1 (the 2nd)",
                 "rule": "default", "host_launches": host_launches, "retraced": 0, "function": short}, **extra)


def pool_row(kid: int, name: str, seen: int, recorded, lost_records: int = 0) -> dict:
    return {"id": kid, "name": name, "selection": "none", "launches_seen": seen, "recorded_launches": list(recorded),
            "records": 100 * len(recorded), "lost_records": lost_records, "lost_records_in_units": lost_records,
            "lanes_without_unit": 0, "lost_records_without_unit": 0, "stray_records": 0, "loss_launches": None}


def pool_summary(rows: list[dict], size: int = 1 << 25) -> dict:
    lost = sum(r["lost_records"] for r in rows)
    used = 4096 + CAPTURE_BYTES * sum(len(r["recorded_launches"]) for r in rows)
    return {"pool_bytes": size, "control_bytes": 4096, "unit_bytes": 256, "units": size // 256,
            "shared_units": size // 256, "units_requested": 0, "bytes_used": used,
            "bytes_needed": used + 512 * lost, "exhausted": bool(lost), "records": sum(r["records"] for r in rows),
            "lost_records": lost, "captures": sum(len(r["recorded_launches"]) for r in rows), "kernels": rows,
            "loss": {b: {"units": 0, "records": 0} for b in ("unit_header_invalid", "duplicate_unit", "superseded",
                                                             "outside_allocation")}}


def process_folder(root: Path, tag: str = "pid100", *, status: str = "complete", captures=None, pool=None,
                   untraced=(), kernels=None, rank=None, fa4_launches=(1,), quack_launches=(1,),
                   **extra) -> Path:
    """A process folder: captures (kernel id -> (template, kernel, short, launch indices); default: FA4 as
    id 0 and quack as id 1, each launch 1 recorded out of 10) and a manifest (`extra`: more of its keys)."""
    folder = root / tag
    folder.mkdir(parents=True, exist_ok=True)
    if captures is None:
        captures = {0: (FA4, FA4_KERNEL, "flash_fwd", fa4_launches), 1: (QUACK, QUACK_KERNEL, "gemm", quack_launches)}
    listed = []
    for kid, (template, kernel, short, launches) in captures.items():
        for i in launches:
            rel = f"captures/{short}/launch_{i:06d}.npy"
            copy_capture(template, folder / rel, kernel, kid, i)
            listed.append({"path": rel, "kernel": kernel, "kernel_id": kid, "launch_index": i})
    if kernels is None:
        kernels = [kernel_entry(FA4_KERNEL, "flash_fwd", 0), kernel_entry(QUACK_KERNEL, "gemm", 1)]
    if pool is None:
        pool = pool_summary([pool_row(kid, kernel, 10, launches) for kid, (_, kernel, _, launches) in captures.items()])
    manifest = {"format": MANIFEST_FORMAT, "status": status, "config": {"out": str(root)}, "pid": 100,
                "rank": rank, "argv": ["train.py", "--steps", "10"], "device": "NVIDIA H200", "pool": pool,
                "kernels": kernels, "untraced": list(untraced), "retraced_ids": [], "caches": [], "captures": listed,
                "errors": [], **extra}
    (folder / "record.json").write_text(manifest_text(manifest))
    return folder
