"""No behaviour change by accident: every shipped capture (examples/**/*.npy with a .json sidecar)
decodes to the same spans, instants and loss totals, and writes byte-identical .pftrace and .json, as
recorded in tests/fixtures/golden/outputs.json.

The fixture was recorded at commit 54ecf9c, before host_decode moved into subpackages (issue 14), in
two configurations (tests/support/golden.py says exactly what is hashed):
* ``default.*``: ``ikp decode CAPTURE -o FILE``, whatever the writers' defaults are;
* ``args.*``: ``write_trace`` with slice args and lane counters on, no gzip, fixed while defaults move.

A deliberate format change (e.g. issue 16's smaller default .pftrace without per-slice args) updates
the fixture through one command, committed with the change so the diff shows which hashes moved:

    python tests/support/golden.py --regen                      # all captures
    python tests/support/golden.py --regen examples/x/cap.npy   # a re-recorded capture
    python tests/support/golden.py --add-new                    # a newly shipped capture

Never edit hashes by hand, and never regenerate to make an unexplained failure go away.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support import golden

ROOT = Path(__file__).resolve().parents[2]

FIXTURE = json.loads(golden.FIXTURE.read_text())["captures"]
CAPTURES = golden.find_captures(ROOT)
REGEN = "python tests/support/golden.py"


def test_fixture_covers_exactly_the_shipped_captures():
    missing = sorted(set(CAPTURES) - set(FIXTURE))
    gone = sorted(set(FIXTURE) - set(CAPTURES))
    assert not missing, f"shipped captures without a golden record: {missing}; record them with `{REGEN} --add-new`"
    assert not gone, f"golden records of captures no longer shipped: {gone}; drop them with `{REGEN} --add-new`"
    assert len(CAPTURES) >= 14  # the 14 captures shipped at 54ecf9c


@pytest.mark.parametrize("rel", CAPTURES)
def test_capture_decodes_and_writes_as_recorded(rel, tmp_path):
    want = FIXTURE.get(rel)
    if want is None:
        pytest.fail(f"{rel}: no golden record; record it with `{REGEN} --add-new`")
    if golden.input_digest(ROOT / rel) != want["input_sha256"]:
        pytest.fail(f"{rel}: the capture or its sidecar changed since it was recorded; if that was deliberate, "
                    f"re-record it with `{REGEN} --regen {rel}`")
    got = golden.record(ROOT, rel, tmp_path)
    decoded = ("spans", "spans_sha256", "instants", "instants_sha256", "nonzero_slots", "lost")
    assert {k: got[k] for k in decoded} == {k: want[k] for k in decoded}, f"{rel} decodes differently"
    changed = [name for name in golden.OUTPUTS if got["outputs"][name] != want["outputs"][name]]
    assert not changed, (f"{rel}: {changed} not byte-identical to the record ({want['recorded_from']}); a deliberate "
                         f"format change regenerates with `{REGEN} --regen` (see this file's docstring)")


def test_table_digest_sees_content_not_row_order():
    from host_decode.load.capture import load_capture

    spans = load_capture(ROOT / "examples" / "basic" / "capture.npy").spans
    digest = golden.table_digest(spans)
    assert golden.table_digest(spans[::-1]) == digest
    moved = spans.copy()
    moved["end_ns"][7] += 32
    assert golden.table_digest(moved) != digest
    assert golden.table_digest(spans[:-1]) != digest
    widened = spans.astype([(n, np.int64) for n in spans.dtype.names])
    assert golden.table_digest(widened) == digest
