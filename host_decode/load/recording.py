"""A recording's files (`ikp record`, ``ikp_cute.record``): the configuration handed to the recording process
and the manifest each recording process writes, with their one schema, writer and reader.

* RecordConfig: what to record (kernels, launches, level, pool size, dry run) and where; it travels to the
  program's process as JSON in the environment variable ENV_CONFIG (``to_env`` / ``from_env``), so the
  parent validates everything before the program starts and the child reads exactly what was validated.
* The manifest (``record.json`` of each recording process, MANIFEST): what that process recorded (its
  captures), what it compiled and launched (traced or not, and why), the pool's accounting, the caches it
  set aside; written last, atomically, so a process directory with a manifest is complete.

* Occurrences: each launch of a traced kernel entry is numbered among every host launch of its kernel *name*
  in the process (``name_occurrences``, arithmetic runs: ``add_occurrence`` / ``occurrence_of``), and the
  process's launches per name are totalled (``name_launches``). torch.profiler's slices of one name, in time
  order, are those launches in host order when the process drives one device and launches that name on one
  stream (kernels of one name on several streams may overlap and reorder): launch index L of a kernel is
  then the slice ``occurrence_of(runs, L)`` of its name, if the trace holds every launch
  (host_decode.reports.recording checks the count and says so when it does not).

Invariants (tests/unit/host_decode/load/test_record_config.py guards each): a config survives to_env/from_env
unchanged and a malformed one is a ValueError naming the key; a size is parsed or refused naming the text;
a manifest is validated on writing and on reading (a value outside the schema names file, key and value);
occurrence runs give back every occurrence added (test_occurrence_runs_give_back_every_launch), a malformed
run is a DecodeError naming it, and a manifest without them still loads.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from host_decode.core.errors import DecodeError
from host_decode.load.launches import LaunchPlan, parse_launches
from host_decode.load.sidecar import PIPELINE_LEVELS, Key, read_json, sidecar_text, validate

ENV_CONFIG = "IKP_RECORD"  # the config, as JSON, for the recording process
ENV_OUT = "IKP_RECORD_OUT"  # where the process's recording goes: a program may write its own traces there
ENV_DRY_RUN = "IKP_RECORD_DRY_RUN"  # the architecture of a dry run: a program may pick its fake-tensor path
MANIFEST_NAME = "record.json"
MANIFEST_FORMAT = "ikp-record"
ARCHES = ("sm_90a", "sm_100a")  # dry-run targets: what FA4 and quack build without a GPU
STATUSES = ("complete", "interrupted", "failed")
MIN_POOL_BYTES = 1 << 20  # the pool's control block for its 512 kernels takes ~140 KB of it
MAX_POOL_BYTES = 1 << 40
MAX_OCCURRENCE_RUNS = 4096  # runs kept per kernel entry; launches past them have no recorded occurrence
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from '256M', '1.5G', '64MiB', '4096k', '1048576' (binary units: k = 1024); ValueError naming
    the text when malformed, not a multiple of 8 or outside [1 MiB, 1 TiB]."""
    m = _SIZE.fullmatch(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a size (expected e.g. 256M, 2G, 1.5GiB, 1048576)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if not MIN_POOL_BYTES <= value <= MAX_POOL_BYTES or value % 8:
        raise ValueError(f"{text!r}: {value} bytes; a pool takes 1M to 1T, a multiple of 8 bytes")
    return value


def format_size(n: int | None) -> str:
    """'256 MiB', '5.3 GiB', '812 B'."""
    if n is None:
        return "?"
    n = int(n)
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value >= 100 or value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


@dataclasses.dataclass(frozen=True)
class RecordConfig:
    """What a recording records and where it writes (see the module docstring).

    out:        the directory this process writes its recording into
    kernels:    regular expression (re.search) on kernel names: only those are traced; None = every kernel
    launches:   the --launches spec (host_decode.load.launches), default one launch per kernel after its first
    level:      trace_pipelines' level: "waits", "signals" or "all"
    pool_bytes: the recording pool's size; None = the pool's default
    dry_run:    an architecture (ARCHES): compile for it without a GPU, launch nothing
    """

    out: str
    kernels: str | None = None
    launches: str = "1"
    level: str = "waits"
    pool_bytes: int | None = None
    dry_run: str | None = None

    def __post_init__(self):
        if not isinstance(self.out, str) or not self.out:
            raise ValueError(f"record config: out={self.out!r}; expected a directory path")
        if self.kernels is not None:
            compile_kernels(self.kernels)
        self.plan()  # raises naming the bad item
        if self.level not in PIPELINE_LEVELS:
            raise ValueError(f"record config: level={self.level!r}; expected one of {PIPELINE_LEVELS}")
        if self.pool_bytes is not None and (isinstance(self.pool_bytes, bool) or not isinstance(self.pool_bytes, int)
                                            or not MIN_POOL_BYTES <= self.pool_bytes <= MAX_POOL_BYTES
                                            or self.pool_bytes % 8):
            raise ValueError(f"record config: pool_bytes={self.pool_bytes!r}; expected bytes in [1M, 1T], a multiple "
                             "of 8")
        if self.dry_run is not None and self.dry_run not in ARCHES:
            raise ValueError(f"record config: dry_run={self.dry_run!r}; expected one of {ARCHES}")

    def plan(self) -> LaunchPlan:
        return parse_launches(self.launches)

    def kernel_regex(self) -> re.Pattern | None:
        return None if self.kernels is None else compile_kernels(self.kernels)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def to_env(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, obj: Any, source: str = ENV_CONFIG) -> RecordConfig:
        if not isinstance(obj, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(obj).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise ValueError(f"{source}: unknown key(s) {unknown}; known: {sorted(known)}")
        try:
            return cls(**obj)
        except TypeError as e:
            raise ValueError(f"{source}: {e}") from None

    @classmethod
    def from_env(cls, text: str) -> RecordConfig:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{ENV_CONFIG}: not JSON ({e})") from None
        return cls.from_json(obj)


def compile_kernels(pattern: str) -> re.Pattern:
    """The --kernels regular expression, or a ValueError naming it."""
    try:
        return re.compile(pattern)
    except (re.error, TypeError) as e:
        raise ValueError(f"--kernels {pattern!r} is not a regular expression ({e})") from None


MANIFEST: dict[str, Key] = {
    "format": Key("str", "the manifest's format", (MANIFEST_FORMAT,)),
    "status": Key("str", "complete: the program ended; interrupted: by a signal; failed: recording failed",
                  STATUSES),
    "config": Key("object", "the RecordConfig the process ran with"),
    "pid": Key("int", "the recording process", minimum=0),
    "rank": Key("int", "its rank (RANK / LOCAL_RANK), when set", minimum=0),
    "argv": Key("list", "the program's command line"),
    "signal": Key("str", "the signal that ended the program, if one did"),
    "device": Key("str", "the GPU's name (or the dry run's architecture)"),
    "started_ns": Key("int", "host clock when recording began (ns since the epoch)", minimum=0),
    "ended_ns": Key("int", "host clock when the recording was written", minimum=0),
    "pool": Key("object", "the pool's summary (host_decode.load.pool.read_pool: bytes, used, needed, records, "
                          "lost records, per kernel id the launches the device counted and recorded)"),
    "kernels": Key("list", "one entry per compiled kernel while recording, one per pool kernel id when traced (or "
                           "why not): its compile's index and arguments, selection, builds (compiles sharing the "
                           "id), launches seen from Python (over those builds)"),
    "retraced_ids": Key("list", "kernel ids of traces the DSL's in-memory cache answered that no kernel entry "
                                "holds (never launched)"),
    "untraced": Key("list", "launches of CuTe DSL kernels the recorder did not trace, with the reason"),
    "caches": Key("list", "compile caches set aside while recording, and how"),
    "captures": Key("list", "the captures written: path (relative), kernel, kernel_id, launch_index"),
    "dry_run": Key("object", "the dry run: architecture, per kernel what would be traced, launches skipped"),
    "errors": Key("list", "what went wrong while recording (each a string)"),
    "timings": Key("object", "timings the program measured while recording (gpu/record_suite.py)"),
    "name_launches": Key("object", "{kernel name: host launches of that name seen in this process}, traced or not "
                                   "(a kernel entry's name_occurrences number its launches among them)"),
    "name_graph_launches": Key("object", "{kernel name: those of its launches made while a CUDA graph was being "
                                         "captured} (replays launch them again where Python does not see it)"),
}


def add_occurrence(runs: list, launch: int, occurrence: int) -> bool:
    """Note that launch index `launch` of a kernel entry was occurrence `occurrence` of its name: runs are
    [first launch, its occurrence, count, step] (launches first..first+count-1 at occurrence + j * step), so a
    kernel launched alone or interleaved with others at a regular stride costs one run. False (nothing noted)
    once MAX_OCCURRENCE_RUNS runs are held."""
    if runs:
        first, occ, count, step = runs[-1]
        if launch == first + count and (occurrence == occ + count * step or (count == 1 and occurrence > occ)):
            runs[-1] = [first, occ, count + 1, occurrence - occ if count == 1 else step]
            return True
    if len(runs) >= MAX_OCCURRENCE_RUNS:
        return False
    runs.append([int(launch), int(occurrence), 1, 1])
    return True


def occurrence_of(runs, launch: int, source: str = "name_occurrences") -> int | None:
    """The occurrence of launch index `launch` among its name's launches (add_occurrence's runs), None when no
    run holds it; DecodeError naming `source` and the run when a run is not four integers (count >= 1)."""
    for i, run in enumerate(runs or []):
        if (not isinstance(run, list) or len(run) != 4 or any(isinstance(v, bool) or not isinstance(v, int)
                                                               for v in run) or run[2] < 1 or min(run) < 0):
            raise DecodeError(f"run {i} = {str(run)[:60]}: expected [first launch, occurrence, count >= 1, step], "
                              "non-negative integers", source=source)
        first, occ, count, step = run
        if first <= launch < first + count:
            return occ + (launch - first) * step
    return None


def manifest_text(manifest: dict, source: str = MANIFEST_NAME) -> str:
    """The manifest as written (validated by MANIFEST first)."""
    return sidecar_text(manifest, MANIFEST, source)


def read_manifest(path: str | Path) -> dict:
    """A process's record.json, validated (DecodeError naming the file and the key otherwise)."""
    obj = read_json(path)
    return validate(obj, MANIFEST, str(path))
