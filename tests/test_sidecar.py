"""The capture sidecar schema: one writer, one validator; a value outside the documented set is refused."""

import json

import numpy as np
import pytest

import host_decode as hd
from host_decode.core.errors import DecodeError
from tests.buffers import B, BufferBuilder, E

MODES = ("cursor", "deferred", "smem", "lean", "atomic", "static")


def nested_atomic_buffer() -> np.ndarray:
    """An atomic-mode lane: a region reserves its BEGIN and END slots at its BEGIN, so the nested region's
    slots come after the outer END (a step back in time, 100 ns -> 400 ns -> 200 ns)."""
    b = BufferBuilder(1, 1, 8)
    b.put(0, 100, 1, B).put(0, 400, 1, E).put(0, 200, 2, B).put(0, 300, 2, E)
    return b.buf


def test_an_unknown_mode_is_refused_naming_the_key_and_the_allowed_values(tmp_path):
    """mode "Atomic" (not "atomic") used to decode the nested region 2**32 ns late (a launch of 4294.968 ms
    instead of 300 ns): the sidecar is refused, naming the file, the key, the value and the allowed ones."""
    np.save(tmp_path / "cap.npy", nested_atomic_buffer())
    (tmp_path / "cap.json").write_text(json.dumps({"format": "ikp-v1", "num_blocks": 1, "num_groups": 1,
                                                   "write_stride": 1, "mode": "Atomic"}))
    with pytest.raises(DecodeError) as e:
        hd.load_capture(tmp_path / "cap.npy")
    text = str(e.value)
    assert "cap.json" in text and "'mode'" in text and "'Atomic'" in text, text
    assert all(repr(m) in text for m in MODES), text
    # the documented spelling decodes the launch as recorded
    (tmp_path / "cap.json").write_text(json.dumps({"format": "ikp-v1", "write_stride": 1, "mode": "atomic"}))
    trace = hd.load_capture(tmp_path / "cap.npy")
    assert trace.end_ns - trace.start_ns == 300
