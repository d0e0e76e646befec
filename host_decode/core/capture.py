"""Captures on disk: BUFFER.npy (the raw v1 buffer, uint64) + BUFFER.json (the sidecar).

Sidecar keys: format ("ikp-v1"), events and groups ({id: name}), write_stride, records_per_lane,
num_blocks, num_groups, and whatever else the producer knows (kernel, device, sm_count, mode,
launch_index, host_ns, ...). Decoding needs only the .npy; the sidecar adds names and facts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.decoder import as_uint64
from host_decode.core.jsonable import to_jsonable
from host_decode.core.model import Names

FORMAT = "ikp-v1"


def save_capture(path: str | Path, buffer: Any, names: Names | dict | None = None, **meta: Any) -> Path:
    """Write BUFFER.npy and its sidecar BUFFER.json; returns the .npy path. Both are written to temporary
    files and renamed into place together (host_decode.core.files): an interrupted save leaves the
    previous capture, never a buffer without its sidecar or a truncated one (tests/test_cli_safety.py)."""
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
    text = json.dumps(to_jsonable(side), indent=1, sort_keys=True)
    with OutputFiles(force=True) as out:  # a library save replaces a capture of the same name, atomically
        npy, sidecar = out.add(path), out.add(sidecar_of(path))
        with open(npy, "wb") as f:
            np.save(f, buf, allow_pickle=False)
        sidecar.write_text(text)
    return path
