"""The flag keys of the capture sidecar (host_decode/load/sidecar.py, docs/sidecar.md): `flags` (one entry per traced
flag call site), `flag_buffers` (where a recorded address can lie), `world_size` and the clock keys; each refused
outside its set on saving and on loading, naming the entry and the key."""

from __future__ import annotations

import json

import numpy as np
import pytest

import host_decode as hd
from host_decode.core import wire
from host_decode.core.errors import DecodeError
from host_decode.load.capture import save_capture

SIGNAL = {"id": 3, "kind": "signal", "op": "red_add1", "site": "k.py:10", "order": "release", "scope": "gpu",
          "update": "add", "value": 1}
WAIT = {"id": 4, "kind": "wait", "op": "spin_lock_atom_cas_acquire_wait", "site": "k.py:20", "order": "acquire",
        "scope": "sys", "cmp": "eq", "expected": "recorded", "reset": "recorded"}
BUFFERS = [{"name": "flags", "owner_rank": r, "base": 0x7F00_0000_0000 + r * 0x1000, "bytes": 64, "elem_bytes": 4}
           for r in range(2)]
CLOCK = {"clock_offset_ns": -1_234_567, "clock_error_ns": 2_100, "clock_reference": "host CLOCK_REALTIME of node7",
         "rank": 1, "world_size": 2}


def small_buffer() -> np.ndarray:
    buf = np.zeros(wire.buffer_slots(1, 4), np.uint64)
    buf[0] = wire.pack_header(1, 1)
    buf[1] = wire.pack_record(100, wire.make_tag(0, 3, int(wire.EventType.INSTANT)))
    return buf


def test_a_flag_capture_round_trips(tmp_path):
    path = save_capture(tmp_path / "cap.npy", small_buffer(), flags=[SIGNAL, WAIT], flag_buffers=BUFFERS, **CLOCK)
    meta = hd.load_capture(path).meta
    assert meta["flags"] == [SIGNAL, WAIT] and meta["flag_buffers"] == BUFFERS
    assert {k: meta[k] for k in CLOCK} == CLOCK


@pytest.mark.parametrize("entries, message", [
    ([dict(SIGNAL, scope="device")], "'flags[0].scope' must be one of 'cta', 'cluster', 'gpu', 'sys', got 'device'"),
    ([{k: v for k, v in WAIT.items() if k != "cmp"}], "'flags[0]' has no 'cmp' (a flag site needs id, kind"),
    ([SIGNAL, dict(WAIT, expected=2.5)], "'flags[1].expected' must be an integer or 'recorded', got 2.5"),
    ([dict(SIGNAL, kind="poll")], "'flags[0].kind' must be one of 'signal', 'wait'"),
    ([dict(SIGNAL, id=1019)], "'flags[0].id' must be a user event id (<= 1018), got 1019"),
    ([SIGNAL, dict(WAIT, id=3)], "'flags[1].id' 3 is also the id of flags[0]"),
    ([dict(SIGNAL, update="max")], "'flags[0].update' must be one of 'add', 'store'"),
    ([5], "'flags[0]' must be an object, got 5"),
])
def test_bad_flag_sites_are_refused_naming_entry_and_key(tmp_path, entries, message):
    with pytest.raises(DecodeError) as e:
        save_capture(tmp_path / "new" / "cap.npy", small_buffer(), flags=entries)
    assert message in str(e.value), e.value
    assert not (tmp_path / "new" / "cap.npy").exists()
    path = save_capture(tmp_path / "cap.npy", small_buffer())
    side = json.loads(path.with_suffix(".json").read_text())
    path.with_suffix(".json").write_text(json.dumps(dict(side, flags=entries)))
    with pytest.raises(DecodeError, match="cap.json"):
        hd.load_capture(path)


@pytest.mark.parametrize("change, message", [
    ({"base": -8}, "'flag_buffers[1].base' must be an integer >= 0, got -8"),
    ({"bytes": 0}, "'flag_buffers[1].bytes' must be an integer >= 1, got 0"),
    ({"owner_rank": None}, "'flag_buffers[1]' has no 'owner_rank'"),
    ({"name": 7}, "'flag_buffers[1].name' must be a string, got 7"),
])
def test_bad_flag_buffers_are_refused(tmp_path, change, message):
    with pytest.raises(DecodeError) as e:
        save_capture(tmp_path / "cap.npy", small_buffer(), flag_buffers=[BUFFERS[0], dict(BUFFERS[1], **change)])
    assert message in str(e.value), e.value


@pytest.mark.parametrize("key, value, message", [
    ("clock_error_ns", -1, "'clock_error_ns' must be an integer >= 0, got -1"),
    ("clock_offset_ns", 1.5, "'clock_offset_ns' must be an integer, got 1.5"),
    ("world_size", 0, "'world_size' must be an integer >= 1, got 0"),
    ("clock_reference", 3, "'clock_reference' must be a string, got 3"),
])
def test_bad_clock_keys_are_refused(tmp_path, key, value, message):
    with pytest.raises(DecodeError, match=message.replace("(", r"\(")):
        save_capture(tmp_path / "cap.npy", small_buffer(), **{key: value})
