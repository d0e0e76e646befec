"""The variants gpu/pipelines_cost.py times on the GPU, as (name, level, trace_pipelines options): the
default levels, the rows that show what the default's thresholds buy, and the ablation that finds where a
traced kernel's cost goes (that script's docstring says what each row isolates).

Invariant a change could break: every variant is a valid trace_pipelines call, names are unique, and the
ablation keeps the rows the analysis relies on (a bad option would only surface on the GPU):
tests/unit/examples/test_persistent_gemm_compile.py::test_cost_harness_variants_are_valid_trace_options.
"""

DEFAULT = [("waits", "waits", {}), ("signals", "signals", {})]
# every kernel, FA4 included: the default's thresholds against the neighbours one could choose instead
THRESHOLDS = [
    ("acquire_256ns", "waits", {"blocked_ns": {"acquire": 256}}),
    ("bar_sync_1024ns", "waits", {"blocked_ns": {"bar_sync": 1024}}),
    ("blocked_1024ns", "waits", {"blocked_ns": 1024}),
    ("never_stored", "waits", {"blocked_ns": 2**31 - 1}),
    ("signals_acquire_256ns", "signals", {"blocked_ns": {"acquire": 256}}),
    ("signals_commit", "signals", {"ops": {"commit"}}),
    ("signals_release", "signals", {"ops": {"release"}}),
]
# the GEMMs: one op alone, how polls are traced, lower thresholds, every wait stored
ABLATION = [
    ("acquire_only", "waits", {"ops": {"acquire"}}),
    ("wait_only", "waits", {"ops": {"wait"}}),
    ("bar_sync_only", "waits", {"ops": {"bar_sync"}}),
    ("polls_timed", "waits", {"polls": "timed"}),
    ("blocked_64ns", "waits", {"blocked_ns": 64}),
    ("passing_waits", "waits", {"passing_waits": True}),
]
