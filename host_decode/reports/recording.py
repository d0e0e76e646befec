"""The folder a recording leaves (`ikp record -o DIR`, ``ikp_cute.record(out=DIR)``), finished from what each
recording process wrote (a manifest, host_decode.load.recording, and its captures):

    DIR/summary.txt          read this first: per kernel, what bounds it and where to click next
    DIR/index.html           the same as a page, with links
    DIR/trace.pftrace        every recorded launch of every kernel on one timeline (`ikp view DIR`)
    DIR/trace_torch.json.gz  those regions inside the program's torch.profiler trace (given, or found in DIR)
    DIR/captures/<kernel>/launch_NNNNNN.npy (+ .json)   each recorded launch (ikp decode, waits, report)
    DIR/waits/<kernel>/launch_NNNNNN.txt (+ .json)      `ikp waits` of each capture
    DIR/record.json          the manifest of the recording process (several processes: DIR/<rank or pid>/)
    DIR/summary.json         what summary.txt says, as data

Everything is built in the staging folder the recording wrote and renamed into place at the end
(``finish_recording``): DIR appears complete or not at all. A process folder without a manifest (a process
killed before it wrote) is left out and said so. One capture that cannot be read is said so and the others
are finished.

Placement on one timeline: every capture of the pool carries its lanes' anchors (absolute %globaltimer per
lane), so launches of all kernels are merged at their own times (host_decode.analysis.sessions.concat,
mode "timeline", as `ikp merge` places launches); ranks on several GPUs share it to within the GPUs' clock
offset. Guarded by tests/unit/host_decode/reports/test_recording.py.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from host_decode.core.jsonable import dumps
from host_decode.load.recording import MANIFEST_NAME, read_manifest

SUMMARY_NAMES = ("summary.txt", "index.html", "summary.json", "trace.pftrace")
TORCH_OUTPUT = "trace_torch.json.gz"
TORCH_MAX_LANES = 4096  # lanes written into the profiler trace at most (the rest counted, as ikp merge)


@dataclasses.dataclass
class Process:
    folder: str  # relative to the recording's root ("" for a single process)
    manifest: dict


@dataclasses.dataclass
class Capture:
    path: Path  # relative to the root
    kernel: str
    kernel_id: int  # the pool's id of the compiled kernel (-1: unknown)
    launch_index: int
    process: str
    trace: object = None
    error: str = ""
    waits: dict | None = None
    waits_text: Path | None = None
    waits_json: Path | None = None


def find_processes(root: Path) -> tuple[list[Process], list[str]]:
    """The process folders of a staging folder holding a manifest, and the names of those without one."""
    done, incomplete = [], []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (d / MANIFEST_NAME).exists():
            done.append(Process(d.name, read_manifest(d / MANIFEST_NAME)))
        elif d.name.startswith(("pid", "rank")):
            incomplete.append(d.name)
    return done, incomplete


def flatten(root: Path, processes: list[Process]) -> list[Process]:
    """One process: its folder's contents move up to the root (paths in its manifest are relative)."""
    if len(processes) != 1:
        return processes
    folder = root / processes[0].folder
    for item in folder.iterdir():
        os.replace(item, root / item.name)
    folder.rmdir()
    return [Process("", processes[0].manifest)]


def labels_of(process: Process) -> dict:
    """(process folder, kernel id) -> the compiled kernel's label (ikp_cute/record/builds.py name_compiles)."""
    return {(process.folder, int(k["kernel_id"])): k.get("label") or k.get("short") or k["name"]
            for k in process.manifest.get("kernels") or [] if k.get("kernel_id") is not None}


def load_captures(root: Path, processes: list[Process], progress: bool | None = None) -> list[Capture]:
    """Every capture the manifests list, decoded (or its error kept)."""
    from host_decode.load.capture import load_capture

    captures = [Capture(Path(p.folder) / c["path"], c["kernel"], int(c.get("kernel_id", -1)), int(c["launch_index"]),
                        p.folder) for p in processes for c in p.manifest.get("captures") or []]
    for c in _progress(captures, "decode", progress):
        try:
            c.trace = load_capture(root / c.path)
        except Exception as e:  # noqa: BLE001 - one bad capture must not cost the others
            c.error = f"{type(e).__name__}: {e}"
    return captures


def _progress(items: list, desc: str, progress: bool | None):
    import sys

    on = sys.stderr.isatty() if progress is None else bool(progress)
    if not on or len(items) < 2:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, leave=False, file=sys.stderr)


def write_waits(root: Path, captures: list[Capture], progress: bool | None = None) -> None:
    """`ikp waits` of each capture with pipeline metadata: waits/<kernel>/launch_N.txt and .json."""
    from host_decode.analysis.pipeline_meta import has_pipelines
    from host_decode.analysis.waits import waits_summary
    from host_decode.reports.tables.console import make_console
    from host_decode.reports.tables.waits import print_waits

    for c in _progress([c for c in captures if c.trace is not None], "waits", progress):
        if not has_pipelines(c.trace):
            continue
        try:
            c.waits = waits_summary(c.trace)
        except Exception as e:  # noqa: BLE001
            c.error = f"waits: {type(e).__name__}: {e}"
            continue
        rel = Path(str(c.path).replace("captures", "waits", 1)).with_suffix("")
        base = root / rel
        base.parent.mkdir(parents=True, exist_ok=True)
        c.waits_json = rel.with_suffix(".json")
        c.waits_text = rel.with_suffix(".txt")
        (root / c.waits_json).write_text(dumps(c.waits), encoding="utf-8")
        with open(root / c.waits_text, "w", encoding="utf-8") as f:
            print_waits(c.waits, console=make_console(file=f))


def merged_trace(captures: list[Capture], labels: dict):
    """Every decoded capture on one timeline (sessions.concat), or None when there is none; `labels`:
    (process, kernel id) -> the compiled kernel's label."""
    from host_decode.analysis.sessions import concat, parts_from_traces

    good = [c for c in captures if c.trace is not None]
    if not good:
        return None
    labels = [f"{labels.get((c.process, c.kernel_id), c.kernel)} launch {c.launch_index}"
              + (f" ({c.process})" if c.process else "") for c in good]
    return concat(parts_from_traces([c.trace for c in good], labels), mode="timeline")


def write_timeline(root: Path, trace) -> dict:
    from host_decode.writers import write_trace

    stats = write_trace(trace, root / "trace.pftrace")
    return {"path": "trace.pftrace", "bytes": stats.bytes, "slices": stats.slices}


def find_torch_trace(root: Path) -> Path | None:
    """A torch.profiler Chrome trace the program wrote into the recording folder (its own files aside)."""
    import gzip

    ours = {MANIFEST_NAME, "summary.json", TORCH_OUTPUT}
    for path in sorted(root.rglob("*.json*")):
        rel = path.relative_to(root)
        if path.name in ours or rel.parts[0] in ("captures", "waits") or "captures" in rel.parts:
            continue
        if not path.name.endswith((".json", ".json.gz")):
            continue
        try:
            opener = gzip.open if path.name.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as f:
                head = f.read(4096)
            if '"traceEvents"' in head:
                return path
        except (OSError, UnicodeDecodeError, EOFError):
            continue
    return None


def write_torch(root: Path, torch_path: Path, merged, captures: list[Capture], processes: list[Process],
                kernels: list[dict], shown: str | None = None) -> dict:
    """The recording's regions inside the profiler trace: every compiled kernel's captures aligned with their
    slices (host_decode.analysis.align), each capture on the slice its recorded occurrence names
    (``slice_occurrences``), then every region placed with the first kernel that aligned. `shown`: how the
    summary names the profiler trace (its final path)."""
    from host_decode.analysis import align as al
    from host_decode.analysis.sessions import concat, parts_from_traces
    from host_decode.torch_traces.loader import read_chrome
    from host_decode.writers import chrome_json

    doc = read_chrome(torch_path)
    shown = shown or str(torch_path)
    tried, alignments, placed = [], [], None
    groups: dict[tuple, list[Capture]] = {}
    for c in captures:
        if c.trace is not None:
            groups.setdefault((c.process, c.kernel_id), []).append(c)
    manifests = {p.folder: p.manifest for p in processes}
    for key, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        group.sort(key=lambda c: c.launch_index)
        kernel = group[0].kernel
        trace = concat(parts_from_traces([c.trace for c in group]), mode="timeline")
        why = ""
        try:
            _, matches, _ = al.find_kernel(doc, kernel, shown)
            occurrence, why = slice_occurrences(manifests.get(key[0]) or {}, key[1], group, len(matches), kernels)
            result, chosen = al.align(trace, doc, kernel, occurrence, source=shown)
        except Exception as e:  # noqa: BLE001 - try the next kernel; say why each failed
            which = f"{kernel[:60]}" + (f" (kernel id {key[1]})" if key[1] >= 0 else "")
            tried.append(f"{which}: " + (f"{why}; " if why else "") + f"{e}")
            continue
        alignments.append({"kernel": kernel, "kernel_id": key[1], "process": key[0],
                           "launch_indices": [c.launch_index for c in group], "occurrences": result.occurrences,
                           "by": "recorded occurrences" if occurrence is not None else "absolute time",
                           "offset_ns": result.offset_ns, "accuracy_ns": result.accuracy_ns,
                           "consistent": result.consistent, "note": why or None})
        if placed is None:
            placed = (kernel, result, chosen)
    if placed is None:
        return {"path": None, "torch_trace": shown, "not_aligned": tried or ["no decoded capture"]}
    kernel, result, chosen = placed
    pid = chosen[0].get("pid", 0)
    base = int(doc.get("baseTimeNanoseconds", 0))
    kept, left = chrome_json.keep_lanes(merged, TORCH_MAX_LANES)
    regions = chrome_json.chrome_events(kept, process=pid, tid_base=1_000_000,
                                        origin_ns=base - result.offset_ns, cat="ikp")
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    head["ikp_alignment"] = dict(result.to_json(), aligned_on=kernel, torch_trace=shown, **left)
    chrome_json.write_document(root / TORCH_OUTPUT, regions, head=head, foreign=doc["traceEvents"])
    return {"path": TORCH_OUTPUT, "aligned_on": kernel, "offset_ns": result.offset_ns,
            "accuracy_ns": result.accuracy_ns, "consistent": result.consistent, "torch_trace": shown,
            "alignments": alignments, "not_aligned": tried, **left}


def slice_occurrences(manifest: dict, kernel_id: int, group: list[Capture], slices: int,
                      kernels: list[dict]) -> tuple[list[int] | None, str]:
    """Which slice of its kernel name each capture of `group` is, from what the recording process noted
    (host_decode.load.recording: name_occurrences, name_launches), when the profiler trace holds exactly the
    launches of that name the process made, none of them inside a CUDA graph capture, and the device counted
    the kernel's launches as the host did. Otherwise None and why (align then picks by absolute time, or
    refuses). A manifest without occurrences: the launch indices, when the kernel is the only compile of its
    name and the trace has one slice per launch the device counted."""
    name = group[0].kernel
    entry = next((k for k in manifest.get("kernels") or [] if k.get("kernel_id") == kernel_id), None)
    row = next((r for r in (manifest.get("pool") or {}).get("kernels") or [] if r.get("id") == kernel_id), None)
    seen = int(row.get("launches_seen") or 0) if row else None
    launches = (manifest.get("name_launches") or {}).get(name)
    if entry is None or launches is None or "name_occurrences" not in entry:
        alone = sum(k["name"] == name for k in kernels) == 1
        return ([c.launch_index for c in group] if alone and seen and seen == slices else None), ""
    in_graphs = (manifest.get("name_graph_launches") or {}).get(name)
    if in_graphs:
        return None, (f"{in_graphs} of the program's launches of this name were made inside a CUDA graph capture: "
                      "its replays are slices Python did not see, so which slice is which launch is not known")
    if slices < launches:
        return None, (f"the profiler trace holds {slices} slices of this name and the program launched it {launches} "
                      "times: the trace was cut (the profiler's schedule records only some steps), so which slice "
                      "is which launch is not known")
    if slices > launches:
        return None, (f"the profiler trace holds {slices} slices of this name and the program launched it {launches} "
                      "times from Python: launches the recorder did not see (another process, a launch from C++), "
                      "so which slice is which launch is not known")
    if seen is not None and seen != int(entry.get("host_launches") or 0):
        return None, (f"the device counted {seen} launches of kernel id {kernel_id} and Python saw "
                      f"{entry.get('host_launches')}: its launch indices are not its host launches")
    from host_decode.load.recording import occurrence_of

    found = [occurrence_of(entry["name_occurrences"], c.launch_index, f"{c.process or '.'}/record.json: kernel id "
                           f"{kernel_id}: name_occurrences") for c in group]
    if None in found:
        return None, "the recording noted no occurrence for some of its launches (too irregular to keep)"
    return found, ""


def final_path(path: Path, root: Path, display: str) -> str:
    """How the summary names `path`: inside the staging folder `root`, its place in the finished folder
    (`display`), since the staging folder is gone once the recording is finished; elsewhere, as given."""
    try:
        return str(Path(display) / Path(path).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return str(path)


def commit_dir(staging: Path, final: Path, force: bool) -> None:
    """Rename `staging` to `final`; an existing `final` is replaced only with force (renamed aside first,
    removed after)."""
    aside = None
    if final.exists() or final.is_symlink():
        if not force:
            raise FileExistsError(f"{final}: exists; use -f/--force to replace it")
        if not final.is_dir() or final.is_symlink():
            raise FileExistsError(f"{final}: exists and is not a directory; name a new directory")
        aside = final.parent / f".ikp-old-{os.urandom(4).hex()}-{final.name}"
        os.replace(final, aside)
    try:
        os.replace(staging, final)
    except BaseException:
        if aside is not None:
            os.replace(aside, final)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def postprocess(root: Path, *, display: str, torch_trace: str | os.PathLike | None = None,
                progress: bool | None = None) -> dict:
    """Finish the recording in `root` (see the module docstring); `display` is how commands name the final
    folder (the user's -o). Returns summary.json's data."""
    from host_decode.reports.recording_summary import build_summary, write_summary

    root = Path(root)
    processes, incomplete = find_processes(root)
    processes = flatten(root, processes)
    captures = load_captures(root, processes, progress)
    write_waits(root, captures, progress)
    labels = {}
    for p in processes:
        labels.update(labels_of(p))
    timeline, merged, failed = None, None, None
    try:  # the captures stay whatever happens to the timeline
        merged = merged_trace(captures, labels)
        timeline = write_timeline(root, merged) if merged is not None else None
    except Exception as e:  # noqa: BLE001
        failed = f"the timeline could not be written: {type(e).__name__}: {e}"
    summary = build_summary(processes, captures, incomplete, timeline, display)
    if failed:
        summary["processes"][0]["errors"].append(failed)
    torch_path = Path(torch_trace) if torch_trace else find_torch_trace(root)
    if torch_path is not None and merged is not None:
        shown = final_path(torch_path, root, display)
        try:
            summary["torch"] = write_torch(root, torch_path, merged, captures, processes, summary["kernels"], shown)
        except Exception as e:  # noqa: BLE001 - the rest of the folder stands without it
            summary["torch"] = {"path": None, "torch_trace": shown, "not_aligned": [f"{e}"]}
    write_summary(root, summary)
    return summary


def finish_recording(staging: str | os.PathLike, final: str | os.PathLike, *, torch_trace=None, force: bool = False,
                     progress: bool | None = None) -> dict:
    """postprocess `staging`, then rename it to `final` (see commit_dir). Returns the summary."""
    staging, final = Path(staging), Path(final)
    summary = postprocess(staging, display=str(final), torch_trace=torch_trace, progress=progress)
    commit_dir(staging, final, force)
    return summary
