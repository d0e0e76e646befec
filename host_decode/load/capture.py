"""Captures on disk, saved and loaded here: BUFFER.npy (the raw v1 buffer, uint64) + BUFFER.json (the
sidecar, host_decode.load.sidecar: names, geometry, device facts). Decoding needs only the .npy; the
sidecar adds names and facts, and `mode` / `write_stride`, which the decoder follows.

Invariants a change could break, with the test guarding each:
* save_capture then load_capture gives back the buffer's trace with the names and facts saved
  (tests/unit/host_decode/core/test_decode.py::test_capture_round_trip_and_bad_files,
  tests/unit/host_decode/test_public_api.py).
* A save is atomic: an interrupted save leaves the previous capture, never a buffer without its sidecar
  or a truncated one (tests/unit/host_decode/cli/test_cli_safety.py::test_save_capture_is_atomic).
* What is saved is validated by the one sidecar schema before anything is written, and what is loaded
  before anything is decoded (tests/unit/host_decode/load/test_sidecar.py).
* A .npy is never unpickled, and a file that is no .npy array is a DecodeError naming it
  (tests/unit/host_decode/core/test_decode.py::test_capture_round_trip_and_bad_files).
* load_capture decodes from memory only its decode sees, handed back page by page (core/pages.py;
  tests/unit/host_decode/core/test_decode.py::test_owned_buffer_decodes_like_a_loaded_one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.decoder import as_uint64, decode
from host_decode.core.errors import DecodeError
from host_decode.core.model import Names, Trace
from host_decode.core.pages import read_owned
from host_decode.load.sidecar import FORMAT, NAME_KEYS, SIDECAR, read_sidecar, sidecar_text


def save_capture(path: str | Path, buffer: Any, names: Names | dict | None = None, **meta: Any) -> Path:
    """Write BUFFER.npy and its sidecar BUFFER.json; returns the .npy path. The sidecar holds format,
    num_blocks and num_groups (from the buffer's header), the names, and every key of `meta` that is not
    None (load.sidecar.SIDECAR documents the known ones; a value outside their set is a DecodeError before
    anything is written). Both files are written to temporary files and renamed into place together
    (host_decode.core.files)."""
    from host_decode.core.files import OutputFiles, sidecar_of

    path = Path(path)
    if path.suffix != ".npy":
        path = path.with_suffix(".npy")
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = as_uint64(buffer, source=str(path))
    if not isinstance(names, Names):
        names = Names.from_json(names or {})
    num_blocks, num_groups = wire.unpack_header(int(buf[0]))
    side = {"format": FORMAT, "num_blocks": num_blocks, "num_groups": num_groups}
    side.update(names.to_json())
    side.update({k: v for k, v in meta.items() if v is not None})
    text = sidecar_text(side, SIDECAR, str(sidecar_of(path)))
    with OutputFiles(force=True) as out:  # a library save replaces a capture of the same name, atomically
        npy, sidecar = out.add(path), out.add(sidecar_of(path))
        with open(npy, "wb") as f:
            np.save(f, buf, allow_pickle=False)
        sidecar.write_text(text)
    return path


def load_buffer(path: str | Path) -> np.ndarray:
    """Read a raw v1 buffer saved with numpy (.npy; never unpickled)."""
    path = Path(path)
    try:
        arr = np.load(path, allow_pickle=False)
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except Exception as e:  # noqa: BLE001 - numpy's header parser raises ValueError, SyntaxError, TokenError...
        # numpy's own text may advise allow_pickle=True: never pass that on (loading a pickle runs code)
        reason = "" if "pickle" in str(e) else f": {e}"
        raise DecodeError(f"cannot read as a .npy buffer (truncated or not a numpy file){reason}",
                          source=str(path)) from None
    if isinstance(arr, np.lib.npyio.NpzFile):
        raise DecodeError("expected a .npy array, got a .npz archive", source=str(path))
    return arr


def load_capture(path: str | Path, names: Names | dict | None = None, write_stride: int | None = None) -> Trace:
    """Decode BUFFER.npy with its sidecar BUFFER.json (names, write_stride, mode, device facts) if present.
    `names` and `write_stride` replace the sidecar's."""
    path = Path(path)
    side = read_sidecar(path)  # validated: names parse, mode and write_stride are of their sets
    if names is None:
        names = Names.from_json(side)
    meta = {k: v for k, v in side.items() if k not in NAME_KEYS}
    buf = read_owned(path)  # the decode below is the only reader: it frees pages as it goes
    if buf is None:
        buf = load_buffer(path)
    return decode(buf, names=names, write_stride=write_stride, meta=meta, source=str(path))
