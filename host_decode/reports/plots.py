"""PNG plots for people who would rather look: per-region duration histograms, a per-SM Gantt chart of
one launch, and the overlap between groups per block. matplotlib is imported lazily with the Agg
backend (no display needed); spans are drawn as one PolyCollection per chart, not one artist per span.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from host_decode.analysis.launch import block_intervals
from host_decode.analysis.overlap import group_overlap
from host_decode.core.model import Trace


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _color_table(n: int):
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    return [cmap(i % 20) for i in range(n)]


LOG_X_RATIO = 8  # max / min duration above which a panel gets geometric bins on a log axis (as the report)


def plot_histograms(trace: Trace, path: str | os.PathLike, bins: int = 40, log_x: bool | None = None) -> Path:
    """One panel per (group, event): histogram of span durations (ns), counts on the y axis, p50 / p99
    marked. `log_x` default: geometric bins on a log axis when a region's max/min > LOG_X_RATIO, so a
    long tail is not squeezed into the last bin."""
    plt = _plt()
    sp = trace.spans
    pairs = np.stack([sp["group"].astype(np.int64), sp["event"].astype(np.int64)], 1)
    keys = np.unique(pairs, axis=0) if sp.size else np.zeros((0, 2), np.int64)
    n = max(len(keys), 1)
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
    dur = (sp["end_ns"] - sp["start_ns"]).astype(np.int64)
    for ax, (g, e) in zip(axes.flat, keys):
        d = dur[(sp["group"] == g) & (sp["event"] == e)]
        lo, hi = max(int(d.min()), 1), max(int(d.max()), 1)
        geometric = log_x if log_x is not None else hi / lo > LOG_X_RATIO
        if geometric and hi > lo:
            edges = np.geomspace(lo, hi + 1, bins + 1)
        elif hi - lo < bins:  # few distinct ns values: one bin per ns, centred
            edges = np.arange(int(d.min()), int(d.max()) + 2) - 0.5
        else:
            edges = bins
        ax.hist(d, bins=edges, color="#4477aa")
        if geometric and hi > lo:
            ax.set_xscale("log")
        for q, style in ((50, "-"), (99, "--")):
            ax.axvline(np.percentile(d, q), color="k", linestyle=style, linewidth=1, label=f"p{q}")
        ax.set_title(f"{trace.names.group(g)} / {trace.names.event(e)}  (n={d.size})", fontsize=9)
        ax.set_xlabel("duration (ns)" + (", log scale" if geometric and hi > lo else ""))
        ax.set_ylabel("count")
        ax.legend(fontsize=7, loc="upper right")  # 'best' searches every bar (slow)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    if not len(keys):
        axes.flat[0].text(0.5, 0.5, "no regions", ha="center")
    fig.tight_layout()
    return _save(fig, path, plt)


def launch_subset(trace: Trace, launch: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(spans, lanes) of one launch of a merged session (meta['parts']); the whole trace otherwise."""
    parts = (trace.meta or {}).get("parts")
    if launch is None:
        return trace.spans, trace.lanes
    if not 0 <= launch < len(parts or [None]):  # a single capture is one launch: launch 0
        raise ValueError(f"launch {launch} out of range: the session has {len(parts or [None])} launch(es)")
    if not parts:
        return trace.spans, trace.lanes
    lo = parts[launch]["block_offset"]
    hi = lo + parts[launch]["num_blocks"]
    sm = (trace.spans["block"] >= lo) & (trace.spans["block"] < hi)
    lm = (trace.lanes["block"] >= lo) & (trace.lanes["block"] < hi)
    return trace.spans[sm], trace.lanes[lm]


def plot_gantt(trace: Trace, path: str | os.PathLike, launch: int | None = 0, max_spans: int = 100_000) -> Path:
    """Rows = (SM, group) (or (block, group) when SM ids are unknown), x = time from launch start (us);
    regions coloured by event, nested ones drawn thinner. At most `max_spans` spans (the longest ones are
    kept; the title says how many were left out)."""
    plt = _plt()
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    sp, lanes = launch_subset(trace, launch)
    if sp.size == 0:
        fig, ax = plt.subplots(figsize=(8, 2))
        ax.text(0.5, 0.5, "no regions recorded", ha="center")
        ax.axis("off")
        return _save(fig, path, plt)
    left_out = 0
    if sp.size > max_spans:
        keep = np.argsort(-(sp["end_ns"] - sp["start_ns"]), kind="stable")[:max_spans]
        left_out = sp.size - max_spans
        sp = sp[np.sort(keep)]
    blocks = block_intervals(_subtrace(trace, sp, lanes))
    use_sm = bool(blocks.size) and bool((blocks["sm"] >= 0).all())
    slot = residency_slots(blocks) if use_sm else np.zeros(blocks.size, np.int64)
    bi = np.searchsorted(blocks["block"], sp["block"])
    major = blocks["sm"][bi] if use_sm else sp["block"].astype(np.int64)
    n_slots = int(slot.max()) + 1 if slot.size else 1
    row_key = (major * n_slots + slot[bi]) * trace.num_groups + sp["group"].astype(np.int64)
    rows, row = np.unique(row_key, return_inverse=True)
    origin = int(lanes["first_ns"][lanes["first_ns"] >= 0].min()) if lanes.size else 0
    x0 = (sp["start_ns"] - origin) / 1e3
    x1 = (sp["end_ns"] - origin) / 1e3
    depth = np.minimum(sp["depth"].astype(np.float64), 3)
    h = 0.8 * (1 - 0.2 * depth)
    y0, y1 = row - h / 2, row + h / 2
    verts = np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1), np.stack([x0, y1], 1)], 1)
    events, ev_idx = np.unique(sp["event"], return_inverse=True)
    palette = _color_table(len(events))
    colors = [palette[i] for i in ev_idx]
    fig, ax = plt.subplots(figsize=(14, min(2 + 0.18 * len(rows), 40)))
    ax.add_collection(PolyCollection(verts, facecolors=colors, edgecolors="none"))
    ax.set_xlim(0, 1.02 * max(float(x1.max()) if x1.size else 1.0, 1e-3))
    ax.set_ylim(-1, len(rows))
    step = max(1, len(rows) // 40)
    ax.set_yticks(np.arange(0, len(rows), step))
    label = "SM" if use_sm else "block"
    ax.set_yticklabels([_row_label(k, label, n_slots, trace) for k in rows[::step]], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("time from launch start (us)")
    title = f"{(trace.meta or {}).get('kernel') or 'kernel'}: regions per {label}"
    if left_out:
        title += f" ({left_out} shortest spans left out)"
    ax.set_title(title)
    ax.legend(handles=[Patch(color=palette[i], label=trace.names.event(e)) for i, e in enumerate(events)],
              fontsize=7, loc="upper right", ncol=min(len(events), 6))
    fig.tight_layout()
    return _save(fig, path, plt)


def _row_label(key: int, label: str, n_slots: int, trace: Trace) -> str:
    group = trace.names.group(key % trace.num_groups)
    major, slot = divmod(key // trace.num_groups, n_slots)
    return f"{label} {major}" + (f".{slot}" if n_slots > 1 else "") + f" {group}"


def _subtrace(trace: Trace, spans: np.ndarray, lanes: np.ndarray) -> Trace:
    import dataclasses

    return dataclasses.replace(trace, spans=spans, lanes=lanes)


def residency_slots(blocks: np.ndarray) -> np.ndarray:
    """A row index per block such that blocks resident on one SM at the same time get different rows
    (greedy interval colouring by start time: a loop over blocks, which are few, never over spans)."""
    import heapq

    slot = np.zeros(blocks.size, np.int64)
    free: dict[int, list] = {}  # sm -> heap of (end, slot) of busy slots
    count: dict[int, int] = {}
    for i in np.lexsort((blocks["start_ns"], blocks["sm"])):
        sm, start, end = int(blocks["sm"][i]), int(blocks["start_ns"][i]), int(blocks["end_ns"][i])
        heap = free.setdefault(sm, [])
        if heap and heap[0][0] <= start:
            _, s = heapq.heappop(heap)
        else:
            s = count.get(sm, 0)
            count[sm] = s + 1
        slot[i] = s
        heapq.heappush(heap, (end, s))
    return slot


def plot_overlap(trace: Trace, path: str | os.PathLike, pair: tuple[int, int] | None = None) -> Path:
    """Per block: time only A was in a region, both, only B (stacked bars), for one group pair
    (default: the first pair of groups with regions)."""
    plt = _plt()
    ov = group_overlap(trace, pairs=[pair] if pair else None)
    fig, ax = plt.subplots(figsize=(12, 4))
    if ov.size == 0:
        ax.text(0.5, 0.5, "fewer than two groups with regions: no overlap to show", ha="center")
        ax.axis("off")
        return _save(fig, path, plt)
    a, b = int(ov["group_a"][0]), int(ov["group_b"][0])
    ov = ov[(ov["group_a"] == a) & (ov["group_b"] == b)]
    x = np.arange(ov.size)
    only_a = (ov["a_ns"] - ov["both_ns"]) / 1e3
    both = ov["both_ns"] / 1e3
    only_b = (ov["b_ns"] - ov["both_ns"]) / 1e3
    na, nb = trace.names.group(a), trace.names.group(b)
    ax.bar(x, only_a, color="#4477aa", label=f"{na} only")
    ax.bar(x, both, bottom=only_a, color="#228833", label="both")
    ax.bar(x, only_b, bottom=only_a + both, color="#ee6677", label=f"{nb} only")
    ax.set_xlabel("block")
    ax.set_ylabel("time in regions (us)")
    tot_a, tot_b, tot = ov["a_ns"].sum(), ov["b_ns"].sum(), ov["both_ns"].sum()
    ax.set_title(f"overlap: {100 * tot / max(tot_a, 1):.1f}% of {na} time overlapped by {nb}; "
                 f"{100 * tot / max(tot_b, 1):.1f}% of {nb} time overlapped by {na}")
    if ov.size <= 64:
        ax.set_xticks(x)
        ax.set_xticklabels(ov["block"].tolist(), fontsize=6)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return _save(fig, path, plt)


def plot_all(trace: Trace, out_dir: str | os.PathLike, launch: int | None = 0) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [
        plot_histograms(trace, out / "histograms.png"),
        plot_gantt(trace, out / "gantt.png", launch=launch),
        plot_overlap(trace, out / "overlap.png"),
    ]


def _save(fig, path, plt) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
