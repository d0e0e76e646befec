"""host_decode.core.jsonable: the one JSON-safe converter."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from host_decode.core.jsonable import dumps, to_jsonable


def test_numpy_values_become_python_and_keys_strings():
    value = {1: np.int64(3), "a": (np.float32(0.5), np.arange(3)), "b": [np.bool_(True)]}
    assert to_jsonable(value) == {"1": 3, "a": [0.5, [0, 1, 2]], "b": [True]}
    assert type(to_jsonable(np.int64(3))) is int


def test_nan_and_inf_become_null_so_the_json_is_strict():
    assert to_jsonable([math.nan, np.float64("inf"), -math.inf, 1.0]) == [None, None, None, 1.0]
    assert json.loads(dumps({"x": np.array([np.nan, 2.0])})) == {"x": [None, 2.0]}


def test_a_value_without_json_form_is_refused_not_dropped():
    with pytest.raises(TypeError):
        dumps({"path": Path("x")})
