"""PyTorch profiler Chrome traces: the public API of `ikp kernels` in one namespace
(`from host_decode.torch_traces import trace as tt`). The code lives in five modules:
loader (loading with the cache, read_chrome), columns (the table and its builder), chunks (the chunked
parse), analyses (steps, selection, tables, gaps), names (demangle, shorten).
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
from host_decode.torch_traces.columns import (  # noqa: F401
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
    timed_rows,
    us_to_ns,
)
from host_decode.torch_traces.loader import CACHE_FORMAT, CACHE_SUFFIX, CHUNK_BYTES, load_torch_trace, read_chrome  # noqa: F401
from host_decode.torch_traces.names import demangle, short_names, shorten  # noqa: F401
