"""The spans as CSV (`ikp decode --spans-csv`): one row per span, ids and integer ns, with a header.

Invariants, and the tests that guard them: columns block,group,event,start_ns,end_ns,duration_ns, one row per
span of the trace's span table (tests/unit/host_decode/core/test_decode.py::test_spans_csv_round_trip); a failed write
leaves no partial file (tests/unit/host_decode/cli/test_cli_safety.py).
"""

from __future__ import annotations

import numpy as np

from host_decode.core.model import Trace

HEADER = "block,group,event,start_ns,end_ns,duration_ns"


def write_spans_csv(trace: Trace, path) -> None:
    s = trace.spans
    cols = np.column_stack(
        [s["block"], s["group"], s["event"], s["start_ns"], s["end_ns"], s["end_ns"] - s["start_ns"]]
    )
    np.savetxt(path, cols, fmt="%d", delimiter=",", header=HEADER, comments="")
