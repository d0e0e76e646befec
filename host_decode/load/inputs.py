"""Every input ikp reads, loaded in one place: an ikp capture (BUFFER.npy + sidecar, load.capture), a folder
of launches (its *.npy captures, in name order), a ring folder (the captures ``ring.save`` wrote beside
PREFIX_ring.json; one that holds none is refused saying why, load.ring), and other tracers' traces (IKET
JSON / .pftrace, Proton Chrome trace) recognised by content and read through host_decode.interop. Also the
``--names`` file. Every command reads its inputs through here: directly, or through
host_decode.analysis.sessions, which puts the launches of a session on one timeline (load_trace,
load_parts) and keeps the session analysis.

Invariants a change could break, with the test guarding each:
* A file is recognised by its content, whatever its name (interop.detect):
  tests/unit/host_decode/interop/test_interop.py.
* ``--names`` / ``--write-stride`` name and lay out ikp captures; a foreign trace, which carries its own,
  refuses them (tests/unit/host_decode/cli/test_cli_errors.py::test_names_on_a_foreign_trace_is_refused), and they reach
  every capture a command decodes (tests/unit/host_decode/cli/test_cli_grammar.py::test_names_flag_names_the_captures).
* A folder that holds no capture is an error saying why (a ring summary's counts when there is one), never
  an empty session (tests/unit/host_decode/analysis/test_multi.py,
  tests/unit/ikp_cute/test_ring.py::test_save_of_a_window_that_never_opened_says_so).
* JSON that no reader takes is named as what it looks like, never reported as a broken .npy buffer
  (tests/unit/host_decode/interop/test_interop.py).
* A names file is a JSON object with 'events' and/or 'groups'; anything else is an error naming the file
  (tests/unit/host_decode/cli/test_cli_errors.py::test_names_of_the_wrong_shape).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Iterable

from host_decode.core.errors import DecodeError
from host_decode.core.model import Names, Trace
from host_decode.load.capture import load_capture
from host_decode.load.ring import no_captures_reason
from host_decode.load.sidecar import NAME_KEYS, check_name_ids, read_json


@dataclasses.dataclass
class Launches:
    """The launches of some inputs, decoded: one Trace per launch, files in the order given (a folder's by
    name), a foreign trace's launches in its order. `single`: the input was one file holding one launch,
    whose Trace is then the input itself; anything else is a session of launches."""

    traces: list[Trace]
    single: bool


def load_launches(paths: Iterable[str | os.PathLike], progress: bool | None = None, names: Names | None = None,
                  write_stride: int | None = None) -> Launches:
    """Every launch of `paths` (files and folders, see the module docstring). `names` and `write_stride`
    (``--names``, ``--write-stride``) apply to every ikp capture, over its sidecar's."""
    paths = [Path(p) for p in paths]
    files = input_files(paths)
    traces: list[Trace] = []
    for f in _progress(files, "decode", progress):
        traces.extend(load_file(f, names=names, write_stride=write_stride))
    return Launches(traces, single=len(paths) == 1 and not paths[0].is_dir() and len(traces) == 1)


def input_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The files of `paths`: a file as given, a folder's *.npy captures in name order (a folder holding none
    is an error saying why)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.npy"))
            if not found:  # a folder that holds no capture would otherwise drop out of the session silently
                raise ValueError(f"{p}: {no_captures_reason(p)}")
            files.extend(found)
        else:
            files.append(p)
    if not files:
        raise ValueError("no captures given (expected BUFFER.npy files or directories holding them)")
    return files


class CaptureFiles:
    """The files of `paths` as input_files lists them, held compactly for inputs of very many captures (a
    folder's names as one numpy bytes array, ~15 bytes a capture): `len()` and iteration in order, each file as
    a str path."""

    def __init__(self, paths: Iterable[str | os.PathLike]):
        import numpy as np

        self.groups = []  # (folder or "", names as bytes)
        for p in map(Path, paths):
            if p.is_dir():
                with os.scandir(p) as it:
                    names = [os.fsencode(e.name) for e in it if e.name.endswith(".npy") and not e.name.startswith(".")]
                if not names:
                    raise ValueError(f"{p}: {no_captures_reason(p)}")
                self.groups.append((str(p), np.sort(np.array(names, dtype=bytes))))
            else:
                self.groups.append(("", np.array([os.fsencode(str(p))], dtype=bytes)))
        if not self.groups:
            raise ValueError("no captures given (expected BUFFER.npy files or directories holding them)")

    def __len__(self) -> int:
        return sum(names.size for _, names in self.groups)

    def __iter__(self):
        for folder, names in self.groups:
            for name in names:
                name = os.fsdecode(bytes(name))
                yield os.path.join(folder, name) if folder else name


def load_file(path: str | os.PathLike, names: Names | None = None, write_stride: int | None = None) -> list[Trace]:
    """The launches of one file: an ikp capture's one, or each launch of another tracer's trace."""
    from host_decode.core.files import special_kind
    from host_decode.interop import detect, read_foreign, refuse_unreadable

    special = special_kind(path)
    if special:  # read twice (its kind sniffed, then loaded): a pipe would hang on the second open
        raise ValueError(f"{path}: is a {special}, not a file; copy it to a file first")
    kind = detect(path)
    if kind:  # an IKET or Proton trace: one Trace per launch it holds
        if names is not None or write_stride is not None:
            raise ValueError(f"{path}: --names and --write-stride apply to ikp captures, not to a {kind} trace")
        return read_foreign(path)
    refuse_unreadable(path)
    return [load_capture(path, names=names, write_stride=write_stride)]


def read_names(path) -> Names | None:
    """A --names file: a JSON object with 'events' and/or 'groups' (a capture sidecar is one); anything else
    is an error naming the file, never silently no names. No --names given: None."""
    if not path:
        return None
    obj = read_json(path, "not a JSON names file", "not a names file: nested too deeply")
    if not isinstance(obj, dict) or not set(NAME_KEYS).intersection(obj):
        got = type(obj).__name__ if not isinstance(obj, dict) else f"an object with keys {sorted(obj)[:6]}"
        raise DecodeError(f"not a names file: expected {{'events': {{id: name}}, 'groups': {{id: name}}}}, got {got}",
                          source=str(path))
    try:
        return check_name_ids(Names.from_json(obj))
    except ValueError as e:
        raise DecodeError(f"not a names file: {e}", source=str(path)) from None


def _progress(items: list, desc: str, progress: bool | None):
    """tqdm over items when asked, or by default when stderr is a terminal and there are many."""
    import sys

    show = progress if progress is not None else (sys.stderr.isatty() and len(items) > 4)
    if not show:
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, unit="launch", leave=False)
