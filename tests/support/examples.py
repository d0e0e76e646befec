"""The examples compiled on the CPU (CUTE_DSL_ARCH=sm_90a): an example's module imported from its folder,
the profile spec the compile tests give it (buffer address baked in), FA4's sm90 forward compiled
through its own host API under torch FakeTensorMode (its PTX).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

from ikp_cute.testing.sass import dump_options

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BAKED = 0x7F0012340000  # the profile buffer address compiled into the instrumented kernels under test


def import_example(example: str, module: str):
    path = str(EXAMPLES / example)
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(module)


def timer_reads(ptx: str) -> int:
    return len(re.findall(r"%globaltimer", ptx))


def profile_spec(events, num_groups, num_blocks, records_per_lane, baked=None, **options):
    from ikp_cute import EventRegistry, ProfileSpec

    return ProfileSpec(num_groups=num_groups, num_blocks=num_blocks, write_stride=num_blocks * num_groups,
                       records_per_lane=records_per_lane, events=EventRegistry(events), baked_address=baked,
                       **options)


def compile_fa4(spec, detail, causal=False):
    """Compile FA4's sm90 forward through its own host API (torch FakeTensorMode: no GPU); returns PTX."""
    os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")
    os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")
    import torch
    from flash_attn.cute import interface
    from torch._subclasses.fake_tensor import FakeTensorMode

    fi = import_example("fa4_sm90", "fa4_instrumented")
    patch = fi.patched_interface(spec, detail) if spec is not None else contextlib.nullcontext()
    saved = interface._flash_attn_fwd.compile_cache
    if spec is None:
        interface._flash_attn_fwd.compile_cache = {}  # FA4's own kernel, compiled afresh
    try:
        with FakeTensorMode(), patch, keeping_ptx(interface):
            q = torch.empty(1, 1024, 4, 128, dtype=torch.bfloat16, device="cuda")
            interface.flash_attn_func(q, torch.empty_like(q), torch.empty_like(q), causal=causal)
            cache = interface._flash_attn_fwd.compile_cache
            (compiled,) = list(cache.values()) if isinstance(cache, dict) else list(cache._cache.values())
    finally:
        interface._flash_attn_fwd.compile_cache = saved
    return ptx_of(compiled)


@contextlib.contextmanager
def keeping_ptx(interface):
    """FA4 calls cute.compile with its own options: add --keep-ptx for the duration (the PTX file in the private
    dump folder, ikp_cute.testing.sass.dump_options)."""
    compile_fn = interface.cute.compile

    class KeepPtx:
        def __call__(self, *args, options: str = "", **kwargs):
            return compile_fn(*args, options=dump_options(f"{options} --keep-ptx"), **kwargs)

    interface.cute.compile = KeepPtx()
    try:
        yield
    finally:
        interface.cute.compile = compile_fn


def ptx_of(compiled) -> str:
    ptx = getattr(compiled, "__ptx__", None)
    if ptx is None:
        pytest.skip("FA4 compiled without --keep-ptx: PTX not available")
    return ptx
