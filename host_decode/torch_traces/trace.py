"""PyTorch profiler Chrome traces: the public API of `ikp kernels` in one namespace
(`from host_decode.torch_traces import trace as tt`). The code lives in three modules:
loader (parsing, cache, read_chrome), analyses (steps, selection, tables, gaps), names (demangle, shorten).
"""

from host_decode.torch_traces.analyses import (  # noqa: F401
    BY_LAUNCH,
    BY_NONE,
    BY_TIME,
    NAME_TABLE_COLUMNS,
    PAIR_TABLE_COLUMNS,
    SORT_KEYS,
    Selection,
    assign_steps,
    busy_summary,
    gap_analysis,
    name_table,
    profiler_steps,
    select,
)
from host_decode.torch_traces.loader import (  # noqa: F401
    CACHE_FORMAT,
    CACHE_SUFFIX,
    CHUNK_BYTES,
    COLUMNS,
    DEVICE_CATS,
    KERNEL_CATS,
    LABEL_BASE,
    MEMORY_CATS,
    RUNTIME_CATS,
    SKIP_NEGATIVE,
    SKIP_OUT_OF_RANGE,
    SKIP_UNTIMED,
    STEP_CATS,
    STEP_RE,
    TIME_LIMIT_US,
    TorchTrace,
    float_column,
    load_torch_trace,
    read_chrome,
    timed_rows,
    us_to_ns,
)
from host_decode.torch_traces.names import demangle, short_names, shorten  # noqa: F401
