"""The capture sidecar schema (host_decode/load/sidecar.py): one writer, one validator; a value outside the
documented set is refused on saving and on loading, naming the file, the key, the value and what is allowed."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import host_decode as hd
from host_decode.core import wire
from host_decode.core.errors import DecodeError
from host_decode.load import sidecar
from host_decode.load.capture import save_capture
from tests.support.buffers import B, BufferBuilder, E

ROOT = Path(__file__).resolve().parents[4]


def nested_atomic_buffer() -> np.ndarray:
    """An atomic-mode lane: a region reserves its BEGIN and END slots at its BEGIN, so the nested region's
    slots come after the outer END (a step back in time, 100 ns -> 400 ns -> 200 ns)."""
    b = BufferBuilder(1, 1, 8)
    b.put(0, 100, 1, B).put(0, 400, 1, E).put(0, 200, 2, B).put(0, 300, 2, E)
    return b.buf


def test_an_unknown_mode_is_refused_naming_the_key_and_the_allowed_values(tmp_path):
    """mode "Atomic" (not "atomic") would decode the nested region with unsigned steps, 2**32 ns late (a
    launch of 4294.968 ms instead of 300 ns): the sidecar is refused, naming the file, the key, the value
    and the allowed ones; decode() refuses the same meta."""
    np.save(tmp_path / "cap.npy", nested_atomic_buffer())
    (tmp_path / "cap.json").write_text(json.dumps({"format": "ikp-v1", "num_blocks": 1, "num_groups": 1,
                                                   "write_stride": 1, "mode": "Atomic"}))
    with pytest.raises(DecodeError) as e:
        hd.load_capture(tmp_path / "cap.npy")
    text = str(e.value)
    assert "cap.json" in text and "'mode'" in text and "'Atomic'" in text, text
    assert all(repr(m) in text for m in wire.RECORDING_MODES), text
    with pytest.raises(DecodeError, match="'mode' must be one of 'cursor'.*got 'Atomic'"):
        hd.decode(nested_atomic_buffer(), meta={"mode": "Atomic"})
    # the documented spelling decodes the launch as recorded
    (tmp_path / "cap.json").write_text(json.dumps({"format": "ikp-v1", "write_stride": 1, "mode": "atomic"}))
    trace = hd.load_capture(tmp_path / "cap.npy")
    assert trace.end_ns - trace.start_ns == 300


def bad_value(key: sidecar.Key):
    """A value of the wrong type, or outside the key's allowed set / range."""
    if key.kind == "int":
        return -1 if key.minimum is not None and key.minimum <= 0 else 0 if key.minimum else "x"
    if key.kind == "str":
        return "bogus" if key.allowed else 5
    return {"object": [1], "list": {"a": 1}, "names": 5, "ints": ["a"], "ring": {"filled": -1}, "value": "x",
            "flag_sites": [{"kind": "wait"}], "flag_buffers": [{"name": 1}]}[key.kind]


@pytest.mark.parametrize("name", sorted(sidecar.SIDECAR))
def test_every_key_refuses_a_value_outside_its_set(tmp_path, name):
    """Each key of the schema, given a value outside its set in a sidecar on disk: load_capture raises a
    DecodeError naming the file and the key (and for a scalar the value and the rule); save_capture refuses
    to write the same and writes nothing."""
    key, value = sidecar.SIDECAR[name], bad_value(sidecar.SIDECAR[name])
    path = save_capture(tmp_path / "cap.npy", nested_atomic_buffer(), mode="atomic", write_stride=1)
    side = json.loads(path.with_suffix(".json").read_text())
    side[name] = value
    path.with_suffix(".json").write_text(json.dumps(side))
    with pytest.raises(DecodeError) as e:
        hd.load_capture(path)
    text = str(e.value)
    shown = {"names": f"names.{name}", "ring": "'ring.filled'", "flag_sites": f"'{name}[0]'",
             "flag_buffers": f"'{name}[0]'"}.get(key.kind, repr(name))
    assert text.startswith(str(path.with_suffix(".json"))) and shown in text, text
    if name == "format":  # another format: not a sidecar of ours at all
        assert "not an ikp capture sidecar ('format' is 'bogus'; expected format 'ikp-v1'" in text, text
    elif key.kind in ("int", "str"):
        assert f"got {value!r}" in text and key.rule() in text, text
    out = tmp_path / "new" / "cap.npy"
    with pytest.raises(DecodeError) as e:
        save_capture(out, nested_atomic_buffer(), **{name: value})
    assert str(e.value).startswith(str(out.with_suffix(".json"))) and shown in str(e.value), e.value
    assert list(out.parent.iterdir()) == []


def test_a_misspelt_key_is_refused_and_unknown_keys_pass_through(tmp_path):
    """An unknown key reaches trace.meta unchanged (a producer's own facts); one that differs from a known
    key only in case or '-' would leave the decoder on its default: refused, naming the key it resembles."""
    path = save_capture(tmp_path / "cap.npy", nested_atomic_buffer(), mode="atomic", write_stride=1,
                        my_fact={"problem": [1, 2]})
    assert hd.load_capture(path).meta["my_fact"] == {"problem": [1, 2]}
    for wrong, right in (("Mode", "mode"), ("write-stride", "write_stride")):
        side = json.loads(path.with_suffix(".json").read_text())
        side[wrong] = side.pop(right)
        path.with_suffix(".json").write_text(json.dumps(side))
        with pytest.raises(DecodeError, match=f"unknown key '{wrong}': did you mean '{right}'"):
            hd.load_capture(path)
        side[right] = side.pop(wrong)
        path.with_suffix(".json").write_text(json.dumps(side))


def committed_sidecars() -> list[Path]:
    files = subprocess.run(["git", "ls-files", "*.npy"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    return [ROOT / Path(f).with_suffix(".json") for f in files if (ROOT / Path(f).with_suffix(".json")).is_file()]


def test_every_committed_sidecar_validates_and_rewrites():
    """Every sidecar in the repository (examples/, tests/fixtures/) passes the schema, and the one writer
    gives its exact bytes back (sorted keys, indent 1, through core.jsonable)."""
    found = committed_sidecars()
    assert len(found) >= 50, found
    for path in found:
        side = sidecar.read_sidecar(path.with_suffix(".npy"))
        assert sidecar.sidecar_text(side, sidecar.SIDECAR, str(path)) == path.read_text(), path


def test_every_key_the_device_writes_is_in_the_schema(tmp_path):
    """A pipeline trace's save (Session.meta + PipelineTrace.metadata, barriers and the audit's keys
    included) and a ring's save write no key the schema does not name."""
    pytest.importorskip("torch")
    from ikp_cute.pipelines import session_for, trace_pipelines

    session = session_for(2, 4, 16, kernel="toy", device="cpu")
    trace = trace_pipelines(session.spec, "signals", address=0x10000)
    trace.catalog.barrier_base("bar_sync", "k.py:1", 1, "epilogue")
    session.buffer[0] = int(wire.pack_header(2, 4))
    audit_keys = {"pipelines_untraced": [], "barrier_sites": [], "coverage": {}, "hooks_replaced": []}
    meta = dict(trace.metadata(), **audit_keys)  # what a traced compile adds (tests/unit/ikp_cute/test_pipelines_ir.py)
    trace.metadata = lambda: meta
    side = json.loads(trace.save(session, tmp_path / "p.npy").with_suffix(".json").read_text())
    assert {"pipelines", "barriers", "coverage", "barrier_sites", "mode", "fence", "kernel"} <= set(side)
    assert set(side) <= set(sidecar.SIDECAR), set(side) - set(sidecar.SIDECAR)
    ring_keys = {"launch_index", "ring"}  # ikp_cute.ring.Ring.save adds these to Session.meta()
    assert ring_keys <= set(sidecar.SIDECAR)


def test_ring_summary_goes_through_the_one_writer_and_validator(tmp_path):
    from host_decode.load.ring import no_captures_reason, write_ring_summary

    block = {"slots": 2, "filled": 0, "lost_launches": 0, "stray_records": 0, "launches_seen": 3,
             "window": {"start": 5, "stop": 9, "every": 1}, "launches_without_records": []}
    path = write_ring_summary(tmp_path, "launch", "toy", block, [])
    assert json.loads(path.read_text())["format"] == sidecar.RING_FORMAT
    assert "the window (start 5, stop 9, every 1) recorded no launch" in no_captures_reason(tmp_path)
    with pytest.raises(DecodeError, match="'ring.filled' must be an integer >= 0, got -1"):
        write_ring_summary(tmp_path, "other", "toy", dict(block, filled=-1), [])
    assert not (tmp_path / "other_ring.json").exists()
    path.write_text(path.read_text().replace('"launches_seen": 3', '"launches_seen": "3"'))
    with pytest.raises(DecodeError, match="launch_ring.json: 'ring.launches_seen' must be an integer >= 0"):
        no_captures_reason(tmp_path)


def schema_table(schema: dict) -> list[str]:
    kinds = {"int": "integer", "str": "string", "object": "object", "list": "list", "ints": "list of integers",
             "names": "{id: name} or [names]", "ring": "object (ring block)", "value": "integer or `recorded`",
             "flag_sites": "list (flag sites)", "flag_buffers": "list (flag buffers)"}
    rows = []
    for name, key in schema.items():
        allowed = (", ".join(f"`{a}`" for a in key.allowed) if key.allowed else
                   f">= {key.minimum}" if key.minimum is not None else "any")
        rows.append(f"| `{name}` | {kinds[key.kind]} | {allowed} | {key.doc} |")
    return rows


def test_the_documented_tables_are_the_schema():
    """docs/sidecar.md lists the schema's keys, types, allowed values and meanings as they are in code."""
    doc = (ROOT / "docs" / "sidecar.md").read_text().splitlines()
    for schema in (sidecar.SIDECAR, sidecar.RING_BLOCK, sidecar.RING_SUMMARY, sidecar.FLAG_SITE, sidecar.FLAG_BUFFER):
        rows = schema_table(schema)
        start = doc.index(rows[0])
        assert doc[start : start + len(rows)] == rows
