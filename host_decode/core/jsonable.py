"""The one JSON-safe converter of the project: every JSON the project writes goes through it.

numpy scalars and arrays become Python values and lists, dict keys become str, tuples become lists, and
the one NaN rule: NaN and +-inf become null (strict JSON has neither). Anything else is returned as it
is, so ``json.dumps`` still refuses a value that has no JSON form (a sidecar never carries one silently).

Guarded by tests/unit/host_decode/core/test_jsonable.py.
"""

from __future__ import annotations

import json
import math
from typing import Any


def to_jsonable(value: Any) -> Any:
    """`value` in plain JSON types (see the module docstring)."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar or array
        return to_jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(value: Any, *, indent: int | None = 1, sort_keys: bool = False) -> str:
    """Strict JSON text of `value` (to_jsonable first; a value with no JSON form raises TypeError)."""
    return json.dumps(to_jsonable(value), indent=indent, sort_keys=sort_keys, allow_nan=False)
