"""Compare two captures of the same kernel: per-region deltas with a significance test.

Regions are matched by (group name, event name), so captures whose ids were renumbered still line up.
Where one capture gives the same names to several ids (two events both "x", or an unnamed id whose
"event_2" is another's name), those regions stay apart, their ids added to the names that repeat
("x (event 1)", "x (event 2)"); they are never merged or dropped.
For each region the samples are its span durations (``unit="span"``) or, per lane, the mean duration of
its spans (``unit="lane"``: fewer samples, but spans of one lane are correlated, so this is the more
honest choice when a region runs many times per lane).

Numbers per region (A = baseline, B = candidate):

* ``delta_pct`` = 100 * (mean_B - mean_A) / mean_A; ``delta_p50_pct`` the same on medians.
* Welch's t test on the means (unequal variances): t, Welch-Satterthwaite df, two-sided p, and a
  95% confidence interval of the mean difference, also as % of mean_A (``ci_low_pct``, ``ci_high_pct``).
* Mann-Whitney U (normal approximation with tie correction) on the durations: ``p_mw``; used as the
  significance of the median when ``metric="p50"``.
* ``significant`` = p < alpha of the test that belongs to the chosen metric.
* ``status``: "slower" / "faster" when significant and |delta| >= min_delta_pct, else "same";
  "only_a" / "only_b" for regions present in one capture only.

Caveat (documented in README, "Insight"): spans within one capture are not independent samples (they
share SMs, memory traffic, clocks), so p-values are optimistic; the percentage threshold of
``--fail-above`` is the gate, the test only keeps noise from tripping it.

Guarded by tests/unit/host_decode/analysis/test_diff.py.
"""

from __future__ import annotations

import math

import numpy as np

from host_decode.core.model import Trace

# --- distributions (no scipy: numpy-only host side) ---------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with df degrees of freedom."""
    if not math.isfinite(t):
        return 0.0 if math.isinf(t) else float("nan")
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(q: float, df: float) -> float:
    """x with P(T <= x) = q (0.5 < q < 1), by bisection on t_two_sided_p."""
    target = 2.0 * (1.0 - q)
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > target:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if t_two_sided_p(mid, df) > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def welch(a: np.ndarray, b: np.ndarray, confidence: float = 0.95) -> dict:
    """Welch's t test of mean(b) - mean(a): t, df, p (two-sided), CI of the difference."""
    na, nb = a.size, b.size
    ma, mb = float(a.mean()), float(b.mean())
    if na < 2 or nb < 2:
        return {"t": float("nan"), "df": float("nan"), "p": float("nan"), "ci": (float("nan"), float("nan"))}
    va, vb = float(a.var(ddof=1)) / na, float(b.var(ddof=1)) / nb
    se2 = va + vb
    diff = mb - ma
    if se2 == 0.0:  # both constant: any difference is exact
        p = 1.0 if diff == 0 else 0.0
        return {
            "t": math.copysign(math.inf, diff) if diff else 0.0,
            "df": float(na + nb - 2),
            "p": p,
            "ci": (diff, diff),
        }
    t = diff / math.sqrt(se2)
    df = se2 * se2 / ((va * va) / (na - 1) + (vb * vb) / (nb - 1)) if (va or vb) else float(na + nb - 2)
    half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(se2)
    return {"t": t, "df": df, "p": t_two_sided_p(t, df), "ci": (diff - half, diff + half)}


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p of the Mann-Whitney U test, normal approximation with tie correction."""
    na, nb = a.size, b.size
    if na == 0 or nb == 0:
        return float("nan")
    x = np.concatenate([a, b]).astype(np.float64)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    _, first, counts = np.unique(xs, return_index=True, return_counts=True)
    avg_rank = first + (counts + 1) / 2.0  # 1-based mean rank of each tie group
    ranks = np.empty(x.size)
    ranks[order] = np.repeat(avg_rank, counts)
    u = ranks[:na].sum() - na * (na + 1) / 2.0
    n = na + nb
    tie = float((counts**3 - counts).sum())
    var = na * nb / 12.0 * ((n + 1) - tie / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return 1.0
    z = (abs(u - na * nb / 2.0) - 0.5) / math.sqrt(var)  # continuity correction
    return math.erfc(max(z, 0.0) / math.sqrt(2.0))


# --- per-region comparison ---------------------------------------------------------------------------


def region_samples(trace: Trace, unit: str = "span") -> dict[tuple[str, str], np.ndarray]:
    """(group name, event name) -> duration samples (ns, float64). Grouping by sort, not per span."""
    if unit not in ("span", "lane"):
        raise ValueError(f"unit must be 'span' or 'lane', not {unit!r}")
    sp = trace.spans
    if sp.size == 0:
        return {}
    d = (sp["end_ns"] - sp["start_ns"]).astype(np.float64)
    g, e = sp["group"].astype(np.int64), sp["event"].astype(np.int64)
    if unit == "lane":
        keys, inv = np.unique(np.stack([g, e, sp["lane"].astype(np.int64)], 1), axis=0, return_inverse=True)
        inv = np.asarray(inv).reshape(-1)
        d = np.bincount(inv, weights=d) / np.bincount(inv)
        g, e = keys[:, 0], keys[:, 1]
    order = np.lexsort((e, g))
    g, e, d = g[order], e[order], d[order]
    cut = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (e[1:] != e[:-1])])
    keys = _region_names(trace.names, g[cut].tolist(), e[cut].tolist())
    return dict(zip(keys, np.split(d, cut[1:])))


def _region_names(names, groups: list[int], events: list[int]) -> list[tuple[str, str]]:
    """(group name, event name) of each distinct (group id, event id); where a pair of names repeats,
    the ids that differ are added to it ("x (event 2)") so each region keeps its own samples."""
    keys = [(names.group(gi), names.event(ei)) for gi, ei in zip(groups, events)]
    at: dict[tuple[str, str], list[int]] = {}
    for i, key in enumerate(keys):
        at.setdefault(key, []).append(i)
    for (group, event), rows in at.items():
        if len(rows) == 1:
            continue
        several_groups = len({groups[i] for i in rows}) > 1
        several_events = len({events[i] for i in rows}) > 1
        for i in rows:
            keys[i] = (f"{group} (group {groups[i]})" if several_groups else group,
                       f"{event} (event {events[i]})" if several_events else event)
    if len(set(keys)) != len(keys):  # a name that already reads "x (event 2)": say so, never merge
        clash = sorted({k for k in keys if keys.count(k) > 1})
        raise ValueError(f"regions {clash[:3]} name several (group, event) ids even with their ids added: "
                         "rename them in the sidecar")
    return keys


def compare(
    a: Trace,
    b: Trace,
    *,
    unit: str = "span",
    alpha: float = 0.01,
    metric: str = "mean",
    min_delta_pct: float = 0.0,
) -> list[dict]:
    """Per region rows (see the module docstring), regions of A first in A's order, then B-only ones."""
    if metric not in ("mean", "p50"):
        raise ValueError(f"metric must be 'mean' or 'p50', not {metric!r}")
    sa, sb = region_samples(a, unit), region_samples(b, unit)
    rows = []
    for key in list(sa) + [k for k in sb if k not in sa]:
        rows.append(_compare_region(key, sa.get(key), sb.get(key), alpha, metric, min_delta_pct))
    return rows


def _compare_region(key, xa, xb, alpha, metric, min_delta_pct) -> dict:
    row = {
        "group": key[0],
        "event": key[1],
        "n_a": 0 if xa is None else int(xa.size),
        "n_b": 0 if xb is None else int(xb.size),
    }
    if xa is None or xb is None:
        row["status"] = "only_b" if xa is None else "only_a"
        present = xb if xa is None else xa
        row.update(mean_a=_f(None if xa is None else xa.mean()), mean_b=_f(None if xb is None else xb.mean()))
        row["significant"] = False
        row["mean_ns"] = float(present.mean())
        return row
    ma, mb = float(xa.mean()), float(xb.mean())
    pa, pb = float(np.median(xa)), float(np.median(xb))
    w = welch(xa, xb)
    p_mw = mann_whitney_p(xa, xb)
    delta_pct = 100.0 * (mb - ma) / ma if ma else float("nan")
    delta_p50_pct = 100.0 * (pb - pa) / pa if pa else float("nan")
    p = w["p"] if metric == "mean" else p_mw
    delta = delta_pct if metric == "mean" else delta_p50_pct
    significant = bool(math.isfinite(p) and p < alpha)
    if significant and math.isfinite(delta) and abs(delta) >= min_delta_pct and delta != 0:
        status = "slower" if delta > 0 else "faster"
    else:
        status = "same"
    row.update(
        mean_a=ma,
        mean_b=mb,
        p50_a=pa,
        p50_b=pb,
        std_a=float(xa.std(ddof=1)) if xa.size > 1 else 0.0,
        std_b=float(xb.std(ddof=1)) if xb.size > 1 else 0.0,
        delta_ns=mb - ma,
        delta_pct=delta_pct,
        delta_p50_pct=delta_p50_pct,
        ci_low_pct=100.0 * w["ci"][0] / ma if ma else float("nan"),
        ci_high_pct=100.0 * w["ci"][1] / ma if ma else float("nan"),
        t=w["t"],
        df=w["df"],
        p_welch=w["p"],
        p_mw=p_mw,
        significant=significant,
        status=status,
    )
    return row


def _f(x):
    return None if x is None else float(x)


def launch_durations(trace: Trace) -> np.ndarray:
    """Launch length(s) in ns: one per part of a merged session (meta['parts']), else one."""
    lanes = trace.lanes[trace.lanes["first_ns"] >= 0]
    parts = (trace.meta or {}).get("parts")
    if not parts:
        return np.array([trace.end_ns - trace.start_ns], np.float64) if lanes.size else np.zeros(0)
    edges = np.array([p["block_offset"] for p in parts] + [trace.num_blocks])
    part = np.searchsorted(edges, lanes["block"], side="right") - 1
    first = np.full(len(parts), np.iinfo(np.int64).max)
    last = np.full(len(parts), np.iinfo(np.int64).min)
    np.minimum.at(first, part, lanes["first_ns"])
    np.maximum.at(last, part, lanes["last_ns"])
    ok = first <= last
    return (last - first)[ok].astype(np.float64)


def compare_launches(a: Trace, b: Trace, alpha: float = 0.01) -> dict:
    """Whole-launch length A vs B (Welch when each side has >= 2 launches)."""
    la, lb = launch_durations(a), launch_durations(b)
    out = {"n_a": int(la.size), "n_b": int(lb.size)}
    if la.size and lb.size:
        ma, mb = float(la.mean()), float(lb.mean())
        out.update(mean_a=ma, mean_b=mb, delta_pct=100.0 * (mb - ma) / ma if ma else float("nan"))
        w = welch(la, lb)
        out.update(p_welch=w["p"], significant=bool(math.isfinite(w["p"]) and w["p"] < alpha))
    return out


def regressions(rows: list[dict], fail_above_pct: float, metric: str = "mean") -> list[dict]:
    """Rows that got slower by more than fail_above_pct (on the chosen metric) and are significant."""
    field = "delta_pct" if metric == "mean" else "delta_p50_pct"
    return [r for r in rows if r.get("significant") and r.get(field, float("nan")) > fail_above_pct]
