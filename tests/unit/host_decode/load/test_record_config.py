"""The recording's configuration and manifest (host_decode.load.recording): a config survives the trip to the
child unchanged, a bad one names the key, sizes parse or are refused naming the text, a manifest is validated
on writing and reading, occurrence runs give back every launch's occurrence and a malformed run is named."""

from __future__ import annotations

import json

import pytest

from host_decode.core.errors import DecodeError
from host_decode.load.recording import (
    MANIFEST_FORMAT,
    MAX_OCCURRENCE_RUNS,
    RecordConfig,
    add_occurrence,
    format_size,
    manifest_text,
    occurrence_of,
    parse_size,
    read_manifest,
)


def test_config_round_trip_through_the_environment():
    config = RecordConfig(out="/tmp/x", kernels="flash|gemm", launches="flash=2,default=every=5", level="signals",
                          pool_bytes=1 << 28, dry_run="sm_100a")
    assert RecordConfig.from_env(config.to_env()) == config
    assert config.plan().for_kernel("flash_fwd").text == "2" and config.kernel_regex().search("quack_gemm")


@pytest.mark.parametrize("change, names", [
    ({"level": "everything"}, "level"), ({"launches": "x=y"}, "'y' is not a launch selection"),
    ({"kernels": "(oops"}, "--kernels"), ({"pool_bytes": 12}, "pool_bytes"), ({"dry_run": "sm_80"}, "dry_run"),
    ({"pool_bytes": (1 << 20) + 4}, "pool_bytes"),
    ({"out": ""}, "out"), ({"colour": "red"}, "unknown key"), ({"pool_bytes": True}, "pool_bytes"),
])
def test_a_bad_config_names_the_key(change, names):
    obj = dict(RecordConfig(out="/tmp/x").to_json(), **change)
    with pytest.raises(ValueError, match=names.replace("(", r"\(")):
        RecordConfig.from_env(json.dumps(obj))
    with pytest.raises(ValueError, match="not JSON"):
        RecordConfig.from_env("{")


@pytest.mark.parametrize("text, value", [("256M", 256 << 20), ("2G", 2 << 30), ("1.5GiB", 3 << 29), ("4096KB", 1 << 22),
                                         ("1048576", 1 << 20), ("1t", 1 << 40), (" 2048 k ", 2048 << 10)])
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-1M", "1X", "2T", "1k", "0", "64K", "1048577"])
def test_bad_sizes_name_the_text(text):
    with pytest.raises(ValueError, match=repr(text).replace("\\", "\\\\").replace(".", r"\.")):
        parse_size(text)


def test_format_size():
    assert format_size(256 << 20) == "256 MiB" and format_size(5_690_000_000) == "5.3 GiB"
    assert format_size(812) == "812 B"


def test_manifest_is_validated_on_writing_and_reading(tmp_path):
    good = {"format": MANIFEST_FORMAT, "status": "complete", "kernels": [], "pid": 7}
    path = tmp_path / "record.json"
    path.write_text(manifest_text(good))
    assert read_manifest(path)["pid"] == 7
    with pytest.raises(DecodeError, match="'status' must be one of"):
        manifest_text(dict(good, status="done"))
    path.write_text(json.dumps(dict(good, kernels={"not": "a list"})))
    with pytest.raises(DecodeError, match="record.json.*'kernels' must be a list"):
        read_manifest(path)


def test_occurrence_runs_give_back_every_launch():
    """Interleaved launches (two kernels of one name, then a third kernel joining) are a few arithmetic runs,
    each launch's occurrence given back; past MAX_OCCURRENCE_RUNS nothing more is noted (None, not a guess)."""
    order = ["a", "b"] * 20 + ["a", "c", "b"] * 10 + ["a"] * 5
    runs, seen = {"a": [], "b": [], "c": []}, {"a": [], "b": [], "c": []}
    for occurrence, kernel in enumerate(order):
        assert add_occurrence(runs[kernel], len(seen[kernel]), occurrence)
        seen[kernel].append(occurrence)
    for kernel in runs:
        assert [occurrence_of(runs[kernel], i) for i in range(len(seen[kernel]))] == seen[kernel]
        assert occurrence_of(runs[kernel], len(seen[kernel])) is None
    assert len(runs["a"]) <= 3 and runs["b"][0] == [0, 1, 20, 2]
    def irregular_occurrence(i):
        return 3 * i + (i % 2) + (i // 2) * 7  # strides 4, 9, 4, 9...: a run every 2 launches

    irregular = []
    noted = [add_occurrence(irregular, i, irregular_occurrence(i)) for i in range(2 * MAX_OCCURRENCE_RUNS + 5)]
    assert len(irregular) == MAX_OCCURRENCE_RUNS and noted.index(False) == 2 * MAX_OCCURRENCE_RUNS
    assert all(occurrence_of(irregular, i) == irregular_occurrence(i) for i in range(0, 2 * MAX_OCCURRENCE_RUNS, 97))
    assert occurrence_of(irregular, 2 * MAX_OCCURRENCE_RUNS + 1) is None


@pytest.mark.parametrize("run", [[0, 1, 0, 1], [0, 1, 2], ["0", 1, 2, 1], [0, -1, 2, 1], [True, 1, 2, 1]])
def test_a_malformed_occurrence_run_is_named(run):
    with pytest.raises(DecodeError, match=r"k.json: name_occurrences: run 1 = "):
        occurrence_of([[5, 9, 1, 1], run], 99, "k.json: name_occurrences")


def test_a_manifest_without_occurrences_loads(tmp_path):
    path = tmp_path / "record.json"
    path.write_text(json.dumps({"format": MANIFEST_FORMAT, "status": "complete", "pid": 7,
                                "kernels": [{"name": "k", "kernel_id": 0, "host_launches": 3}]}))
    manifest = read_manifest(path)
    assert "name_launches" not in manifest and occurrence_of(manifest["kernels"][0].get("name_occurrences"), 1) is None
