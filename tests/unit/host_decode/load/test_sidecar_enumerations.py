"""Every enumerated sidecar value is checked when the capture is loaded, nested keys included: a value outside
the documented set is refused naming the file, the key (with its place: `pipelines[0].scope`), the value
and the allowed values, by every command (host_decode/load/sidecar.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import host_decode as hd
from host_decode.cli import main
from host_decode.core.errors import DecodeError
from host_decode.load import sidecar

ROOT = Path(__file__).resolve().parents[4]
FA4 = ROOT / "examples" / "pipelines" / "fa4_sm90_signals.npy"

CASES = [  # (where, how to spoil the sidecar, the allowed values the error must list)
    ("'mode'", lambda s: s.update(mode="Atomic"), ("cursor", "atomic", "static")),
    ("'fence'", lambda s: s.update(fence="CTA"), ("none", "cta")),
    ("'pipeline_lanes'", lambda s: s.update(pipeline_lanes="thread"), ("warp",)),
    ("'pipeline_level'", lambda s: s.update(pipeline_level="Signals"), ("waits", "signals", "all")),
    ("'pipelines[0].scope'", lambda s: s["pipelines"][0].update(scope="CTA"), ("cluster", "cta")),
    ("'pipelines[1].released_by'", lambda s: s["pipelines"][1].update(released_by="tma"), ("tma_store",)),
    ("'pipeline_options.polls'", lambda s: s["pipeline_options"].update(polls="Begin"), ("begin", "timed", "off")),
    ("'pipelines[0].num_stages'", lambda s: s["pipelines"][0].update(num_stages=0), (">= 1",)),
]


@pytest.fixture
def capture(tmp_path):
    shutil.copy(FA4, tmp_path / "cap.npy")
    shutil.copy(FA4.with_suffix(".json"), tmp_path / "cap.json")
    return tmp_path / "cap.npy"


@pytest.mark.parametrize("where, spoil, allowed", CASES, ids=[c[0].strip("'") for c in CASES])
def test_a_value_outside_its_set_is_refused_naming_key_and_allowed_values(capture, capsys, where, spoil, allowed):
    side = json.loads(capture.with_suffix(".json").read_text())
    spoil(side)
    capture.with_suffix(".json").write_text(json.dumps(side))
    with pytest.raises(DecodeError) as e:
        hd.load_capture(capture)
    text = str(e.value)
    assert text.startswith(str(capture.with_suffix(".json"))) and where in text, text
    assert all(a in text for a in allowed), text
    for command in (["decode", str(capture)], ["stats", str(capture)]):  # every command loads through it
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and where in err, err


def test_the_committed_pipeline_sidecars_validate():
    for side in sorted((ROOT / "examples").rglob("*.json")):
        obj = json.loads(side.read_text())
        if isinstance(obj, dict) and obj.get("format") == sidecar.FORMAT:
            sidecar.parse_sidecar(obj, str(side))


def test_the_poll_modes_are_the_device_sides():
    pipelines = pytest.importorskip("ikp_cute.pipelines")
    assert tuple(pipelines.POLL_MODES) == sidecar.PIPELINE_POLLS


RANK = ROOT / "tests" / "fixtures" / "flag_ranks" / "rank_1.npy"
FLAG_CASES = [(key, value) for key, value in (("kind", "Signal"), ("order", "seq_cst"), ("scope", "system"),
                                              ("update", "xor"), ("cmp", "ne"))]


@pytest.mark.parametrize("key, value", FLAG_CASES, ids=[k for k, _ in FLAG_CASES])
def test_a_flag_site_value_outside_its_set_is_refused(tmp_path, key, value):
    shutil.copy(RANK, tmp_path / "r.npy")
    side = json.loads(RANK.with_suffix(".json").read_text())
    side["flags"][0][key] = value  # every key of a site is checked, whichever its kind needs
    (tmp_path / "r.json").write_text(json.dumps(side))
    with pytest.raises(DecodeError) as e:
        hd.load_capture(tmp_path / "r.npy")
    text = str(e.value)
    assert f".{key}'" in text and value in text and all(a in text for a in sidecar.FLAG_SITE[key].allowed), text


def test_every_enumerated_key_has_a_case():
    """A key given a set of allowed values (now or later) is spoiled by one of the cases above."""
    covered = {w.strip("'").split(".")[-1] for w, _, _ in CASES} | {k for k, _ in FLAG_CASES}
    for schema in (sidecar.SIDECAR, sidecar.PIPELINE_ENTRY, sidecar.PIPELINE_OPTIONS, sidecar.RING_BLOCK,
                   sidecar.RING_SUMMARY, sidecar.FLAG_SITE, sidecar.FLAG_BUFFER):
        for name, key in schema.items():
            if key.allowed and name != "format":
                assert name in covered, name
