"""The variants gpu/pipelines_cost.py times on the GPU, as (name, level, trace_pipelines options): the
default levels and the ablation that finds where a traced kernel's cost goes (that script's docstring says
what each row isolates).

Invariant a change could break: every variant is a valid trace_pipelines call, names are unique, and the
ablation keeps the rows the analysis relies on (a bad option would only surface on the GPU):
tests/unit/examples/test_persistent_gemm_compile.py::test_cost_harness_variants_are_valid_trace_options.
"""

DEFAULT = [("waits", "waits", {}), ("signals", "signals", {})]
ABLATION = [
    ("acquire_only", "waits", {"ops": {"acquire"}}),
    ("wait_only", "waits", {"ops": {"wait"}}),
    ("bar_sync_only", "waits", {"ops": {"bar_sync"}}),
    ("polls_timed", "waits", {"polls": "timed"}),
    ("polls_off", "waits", {"polls": "off"}),
    ("blocked_64ns", "waits", {"blocked_ns": 64}),
    ("blocked_1024ns", "waits", {"blocked_ns": 1024}),
    ("never_stored", "waits", {"blocked_ns": 2**31 - 1}),
    ("no_named_barriers", "waits", {"named_barriers": False}),
    ("passing_waits", "waits", {"passing_waits": True}),
    ("signals_commit", "signals", {"ops": {"commit"}}),
    ("signals_release", "signals", {"ops": {"release"}}),
]
