"""A short numeric summary of a pipeline capture (numpy only): per pipeline x op x warp group, how many
regions, how long, which share of the lanes' time. It is the proof script's sanity view; the product's
view (matching, flows, critical path) is `ikp waits` (host side)."""

from __future__ import annotations

import numpy as np


def op_of_event(meta: dict) -> dict[int, tuple[str, str, int]]:
    """event id -> (pipeline name, op, stage) from the sidecar's `pipelines` / `barriers` metadata."""
    out: dict[int, tuple[str, str, int]] = {}
    for pipe in meta.get("pipelines", []):
        for op, base in pipe["ids"].items():
            for stage in range(pipe["num_stages"]):
                out[base + stage] = (pipe["name"], op, stage)
    bars = meta.get("barriers") or {}
    for op, key in (("bar_sync", "base_sync"), ("bar_arrive", "base_arrive")):
        if bars.get(key) is not None:
            for i in range(16):
                out[bars[key] + i] = ("barrier", f"{op}[{i}]", i)
    return out


def table(trace, meta: dict, warps_per_group: int = 4) -> list[dict]:
    """Rows {pipeline, op, wg, regions, lanes, total_us, p50_ns, p99_ns, share} for every region kind."""
    ops = op_of_event(meta)
    spans = trace.spans
    lanes = trace.lanes
    lane_time = dict(zip(lanes["lane"].tolist(), (lanes["last_ns"] - lanes["first_ns"]).tolist()))
    wg = spans["group"] // warps_per_group
    dur = spans["end_ns"] - spans["start_ns"]
    merged: dict = {}  # (region kind, warp group) -> mask over spans; the stages of one op together
    for event in np.unique(spans["event"]):
        if int(event) not in ops:
            continue
        pipe, op, _ = ops[int(event)]
        name = op if pipe == "barrier" else f"{op}_{pipe}"
        for g in np.unique(wg[spans["event"] == event]):
            key = (name, int(g))
            merged.setdefault(key, np.zeros(len(spans), bool))
            merged[key] |= (spans["event"] == event) & (wg == g)
    out = []
    for (name, g), sel in sorted(merged.items()):
        d = dur[sel]
        used = np.unique(spans["lane"][sel])
        busy = sum(lane_time.get(int(lane), 0) for lane in used)
        out.append({
            "region": name, "wg": g, "regions": int(sel.sum()), "lanes": len(used),
            "total_us": float(d.sum() / 1e3), "p50_ns": float(np.median(d)), "p99_ns": float(np.percentile(d, 99)),
            "share": float(d.sum() / busy) if busy else float("nan"),
        })
    return out


def per_iteration_ns(trace, meta: dict, pipeline: str, op: str = "acquire", group: int | None = None) -> float:
    """Median gap between consecutive ends of `op` on `pipeline` within one lane (the warp `group` of each
    block; default: the warp that records the most of them, i.e. the producer): the producer's time per
    n-block / k-block."""
    ids = {base + s for p in meta["pipelines"] if p["name"] == pipeline and op in p["ids"]
           for base in [p["ids"][op]] for s in range(p["num_stages"])}
    spans = trace.spans
    mine = spans[np.isin(spans["event"], list(ids))]
    if not len(mine):
        return float("nan")
    if group is None:
        groups, counts = np.unique(mine["group"], return_counts=True)
        group = int(groups[np.argmax(counts)])
    s = mine[mine["group"] == group]
    s = s[np.lexsort((s["end_ns"], s["lane"]))]
    gaps = np.diff(s["end_ns"])
    same = s["lane"][1:] == s["lane"][:-1]
    return float(np.median(gaps[same])) if same.any() else float("nan")


def format_table(rows: list[dict]) -> str:
    lines = [f"{'region':<22}{'wg':>3}{'regions':>9}{'lanes':>7}{'total_us':>11}{'p50_ns':>9}{'p99_ns':>9}{'share':>8}"]
    for r in rows:
        lines.append(f"{r['region']:<22}{r['wg']:>3}{r['regions']:>9}{r['lanes']:>7}{r['total_us']:>11.1f}"
                     f"{r['p50_ns']:>9.0f}{r['p99_ns']:>9.0f}{r['share']:>8.1%}")
    return "\n".join(lines)


def trim_capture(src, dst, keep_blocks: int):
    """Re-pack a v1 capture keeping the first `keep_blocks` blocks (write_stride shrinks to
    keep_blocks * num_groups; lane ids and records unchanged); the sidecar records the trim. Read and
    written through host_decode.load (the one sidecar reader and writer)."""
    from pathlib import Path

    from host_decode.core import wire
    from host_decode.load.capture import load_buffer, save_capture
    from host_decode.load.sidecar import NAME_KEYS, read_sidecar

    src, dst = Path(src), Path(dst)
    buf = load_buffer(src)
    side = read_sidecar(src)
    groups, stride, per_lane = side["num_groups"], side["write_stride"], side["records_per_lane"]
    lanes = keep_blocks * groups
    out = np.zeros(1 + lanes * per_lane, dtype=buf.dtype)
    out[0] = wire.pack_header(keep_blocks, groups)
    for k in range(per_lane):
        out[1 + k * lanes: 1 + (k + 1) * lanes] = buf[1 + k * stride: 1 + k * stride + lanes]
    side.update({"num_blocks": keep_blocks, "write_stride": lanes, "trimmed_from_blocks": side["num_blocks"]})
    names = {k: side.pop(k) for k in NAME_KEYS if k in side}
    return save_capture(dst, out, names, **side)
