"""The terms of `ikp`'s output, explained in one place: `ikp glossary [TERM...]` prints them, docs/glossary.md
is the same table (tests/unit/host_decode/reports/test_glossary.py keeps the two alike), and every console
table names the terms it uses in its footer (Table.terms; the same test checks each is here).

A term is what a header or a line prints; `where` says which command prints it.
"""

from __future__ import annotations

GLOSSARY: dict[str, tuple[str, str]] = {  # term -> (where, meaning)
    # the loss report (ikp decode)
    "non-zero slots": ("decode", "slots of the buffer holding a record; every one is decoded or counted in one "
                                 "bucket below"),
    "paired_begin": ("decode", "the begin record of a decoded region (pairing is a stack per lane and event id, "
                               "in program order)"),
    "paired_end": ("decode", "the end record of a decoded region"),
    "instant": ("decode", "a mark (prof.mark): one record, no duration"),
    "finalize": ("decode", "the record a lane writes at its end (prof.finalize), with the SM it ran on"),
    "unmatched_begin": ("decode", "a begin never closed in its lane (cut off, e.g. by overflow)"),
    "unmatched_end": ("decode", "an end with no open begin of that id in its lane"),
    "after_finalize": ("decode", "a record after its lane's first finalize"),
    "malformed": ("decode", "a record whose tag names a lane that does not exist, or another lane than its slot's"),
    "impossible_span": ("decode", "a region whose end is before its begin (corrupted timer bits): set aside"),
    "impossible_time": ("decode", "a record whose time jumps 2^31 ns or more from both neighbours and back (a "
                                  "flipped bit): set aside"),
    "payload_orphan": ("decode", "a payload record (a flag's address or value) whose own record was not kept: "
                                 "none before it, or one set aside"),
    "dropped on device": ("decode", "records a full lane could not write, counted on the device"),
    "write_stride": ("decode", "slots between two records of a lane in the buffer"),
    "absolute time": ("decode", "times from the GPU's global timer (comparable across launches); relative: from "
                                "the capture's first record"),
    # statistics (ikp decode, stats, kernels)
    "count": ("decode, stats", "regions (spans) of that group and region"),
    "p50, p90, p99": ("decode, stats, waits", "percentiles of the durations: p50 is the median, p99 is exceeded "
                                              "by 1% of them (linear interpolation)"),
    "cv": ("decode, stats", "coefficient of variation: standard deviation / mean of the durations"),
    "histogram": ("stats", "the durations' distribution from min to max in equal bins, as a sparkline"),
    "tail": ("stats", "last block end minus the median block end: the time a launch waits for its last blocks"),
    "imbalance": ("stats", "max / mean over blocks (block end) or SMs (busy time); 1 is perfectly even"),
    "waves": ("stats", "blocks an SM ran over the most it held at once"),
    "bubble": ("stats", "time of a lane, between its first and last record, inside no region"),
    "overlap": ("stats", "time two groups of a block are both inside a region, over each group's region time"),
    "critical lane": ("stats", "the lane of a block that finished last: the one the block waited for"),
    # waits (ikp waits)
    "waits": ("waits", "recorded waits (acquire, wait or bar_sync regions) of the pipeline, op and role"),
    "blocked": ("waits", "a wait that lasted longer than the timer step and than a wait that cannot block takes: "
                         "it really waited (the line above the table gives the threshold)"),
    "passed": ("waits", "a wait that did not block: its barrier was ready when it arrived"),
    "uses": ("waits", "releases (consumer) or commits (producer) of the role: one per use of a stage, traced or "
                      "not"),
    "no record": ("waits", "uses with no wait record: a try_wait found the stage ready, so no wait ran"),
    "of role time": ("waits", "time in these waits over the role's time (its lanes' first to last record)"),
    "waited on": ("waits", "whom the blocked waits waited for: the role whose signal released them, with counts"),
    "itself": ("waits", "a named-barrier sync whose own lane arrived last: it waited on no one"),
    "first use": ("waits", "a producer's first acquire of a stage: empty stages start free, nothing to wait for"),
    "self-released": ("waits", "named-barrier syncs that waited on no one (see itself)"),
    "inferred": ("waits", "a match taken from program order where signals were not traced (level waits)"),
    "flows": ("waits", "arrows from each signal to the wait it released, drawn in the trace"),
    "role": ("waits", "a warp group (wg0, wg1...) when the lanes are warps, else a group of the capture"),
    "critical path": ("waits", "walked back from each block's last lane: its work, and the waits that chained it to "
                               "other roles' work, as shares of the block's time"),
    "timer step": ("waits", "the resolution of the recorded times (the gcd of the data, or the hardware's)"),
    "exact": ("waits", "an async unit's use (TMA load, UMMA) whose issue and ready were both measured"),
    "bounded": ("waits", "an async unit's use with only its issue, its ready, or neither measured: the latency lies "
                         "between the least and the most its bounds allow"),
    "open": ("waits", "an async unit's use with a bound missing: no latency can be given"),
    "clock error": ("waits", "how far a rank's clock offset may be off (its sidecar's clock_error_ns; '?' when it "
                             "states none)"),
    "unmatched": ("waits", "flag waits no recorded signal released (the reasons table says why)"),
    "after signal": ("waits", "from the releasing signal to the end of the wait it released"),
    "released by": ("waits", "the rank, block and warp whose signal ended the wait"),
    # diff
    "delta": ("diff", "(B - A) / A of the metric (mean or p50), in percent"),
    "95% CI": ("diff", "the 95% confidence interval of the delta (Welch)"),
    "p (Welch)": ("diff", "p value of Welch's t test on the means: small = the difference is not chance"),
    "p (MW)": ("diff", "p value of the Mann-Whitney U test on the distributions"),
    "verdict": ("diff", "slower / faster (significant at alpha and above --min-delta), same, only_a / only_b (the "
                        "region is in one side only)"),
    # kernels
    "launch %": ("kernels", "the name's launches over all launches selected"),
    "time %": ("kernels", "the name's summed duration over the table's total"),
    "gap": ("kernels", "on a stream, a start minus the latest earlier end (0 when back to back or overlapping)"),
    "idle": ("kernels", "a stream's span not covered by any kernel or memory operation"),
    "overlaps": ("kernels", "starts before the latest earlier end on the same stream"),
    # hardware (join, pc2region)
    "exclusive": ("join", "a region path's own instructions and samples, not those of regions nested in it"),
    "inclusive": ("join", "a region path and every path below it"),
    "samples": ("join", "PC samples (CUPTI, ncu) that fell in the region's instructions"),
    "stalls": ("join", "why the sampled warps were not issuing, as shares of the region's samples"),
    "markers' own share": ("join", "the share of instructions / samples spent in the recording code itself"),
    "pred-on": ("join", "threads with their predicate on, over threads executing the instructions"),
    "marker": ("pc2region", "an instruction that writes a record (a region's begin or end, a mark)"),
    # merge
    "slack": ("merge", "kernel slice length minus the regions' extent: how far the alignment could move"),
    "accuracy": ("merge", "the bound on the alignment's error"),
    "lead, tail": ("merge", "from the kernel slice's start to the capture's first record, and from its last "
                            "record to the slice's end, once aligned"),
    "written": ("merge", "regions and instants written to the merged trace"),
}


def lookup(terms: list[str]) -> dict[str, tuple[str, str]]:
    """The entries naming any of `terms` (case-insensitive; a term matches inside a longer one); all when empty.
    ValueError naming what matched nothing."""
    if not terms:
        return dict(GLOSSARY)
    out, missing = {}, []
    for t in terms:
        hits = {k: v for k, v in GLOSSARY.items() if t.lower() in k.lower()}
        if not hits:
            missing.append(t)
        out.update(hits)
    if missing:
        raise ValueError(f"not in the glossary: {', '.join(missing)} (`ikp glossary` lists every term)")
    return out


def markdown() -> str:
    """The table docs/glossary.md holds."""
    lines = ["| term | printed by | meaning |", "|---|---|---|"]
    lines += [f"| {term} | {where} | {meaning} |" for term, (where, meaning) in GLOSSARY.items()]
    return "\n".join(lines)
