"""Compile FA4 / quack kernels for a GPU architecture on a CPU-only machine (FakeTensorMode), with or
without pipeline tracing, and return their PTX (and cubin). Used by tests and by the GPU proof script."""

from __future__ import annotations

import contextlib
import os

from ikp_cute.testing.sass import dump_options


@contextlib.contextmanager
def keeping_artifacts(module):
    """`module.cute.compile` gets --keep-ptx --keep-cubin for the duration (FA4/quack pass their own options); the
    files they write go to a private temporary folder (ikp_cute.testing.sass.dump_options), not the working one."""

    compile_fn = module.cute.compile

    class Keep:
        def __call__(self, *args, options: str = "", **kwargs):
            return compile_fn(*args, options=dump_options(f"{options} --keep-ptx --keep-cubin"), **kwargs)

        def __getattr__(self, name):
            return getattr(compile_fn, name)

    module.cute.compile = Keep()
    try:
        yield
    finally:
        module.cute.compile = compile_fn


@contextlib.contextmanager
def fa4_private_caches():
    """FA4 caches compiled kernels by keys that know nothing about tracing: every compile cache of its
    interface (`<function>.compile_cache`) is a fresh dict inside; yields {function name: that dict}."""
    from flash_attn.cute import interface

    owners = {name: value for name, value in vars(interface).items()
              if callable(value) and hasattr(value, "compile_cache")}
    saved = {name: owner.compile_cache for name, owner in owners.items()}
    for owner in owners.values():
        owner.compile_cache = {}
    try:
        yield {name: owner.compile_cache for name, owner in owners.items()}
    finally:
        for name, owner in owners.items():
            owner.compile_cache = saved[name]


@contextlib.contextmanager
def fa4_private_cache():
    """The forward's fresh compile cache (fa4_private_caches)."""
    with fa4_private_caches() as caches:
        yield caches["_flash_attn_fwd"]


def fa4_compile(trace=None, *, batch=1, seqlen=1024, heads=4, causal=False, fake=True):
    """Compile FA4's forward through flash_attn_func; returns the compiled object (FA4's cache entry)."""
    import torch
    from flash_attn.cute import interface

    mode = contextlib.nullcontext()
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = FakeTensorMode()
    with fa4_private_cache() as cache, mode, keeping_artifacts(interface), (trace or contextlib.nullcontext()):
        q = torch.empty(batch, seqlen, heads, 128, dtype=torch.bfloat16, device="cuda")
        interface.flash_attn_func(q, torch.empty_like(q), torch.empty_like(q), causal=causal)
        entries = list(cache.values()) if isinstance(cache, dict) else list(cache._cache.values())
    (compiled,) = entries
    return compiled


def fa4_bwd_compile(trace=None, *, batch=1, seqlen=1024, heads=4, causal=False) -> list:
    """Compile FA4's backward through `_flash_attn_bwd` on fake tensors (its preprocess, main and
    postprocess kernels); returns the compiled objects in compile order (PTX + cubin kept)."""
    import torch
    from flash_attn.cute import interface
    from torch._subclasses.fake_tensor import FakeTensorMode

    with fa4_private_caches(), FakeTensorMode(), capturing_compiles(interface) as compiled, \
            (trace or contextlib.nullcontext()):
        q = torch.empty(batch, seqlen, heads, 128, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(batch, heads, seqlen, dtype=torch.float32, device="cuda")
        interface._flash_attn_bwd(q, torch.empty_like(q), torch.empty_like(q), torch.empty_like(q),
                                  torch.empty_like(q), lse, causal=causal)
    return compiled


def sm90_env():
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")
    os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")


@contextlib.contextmanager
def fake_quack_device(sm_count: int = 132, capability: tuple[int, int] = (9, 0)):
    """quack asks torch / the driver for the device (capability, SM count, active clusters): answer as an
    H100/H200 (or, with capability (10, 0) and 148 SMs, a B200) would, for compiling on a CPU-only
    machine."""
    import types
    from unittest import mock

    import quack.cute_dsl_utils as qu
    import torch

    major, minor = capability
    props = types.SimpleNamespace(multi_processor_count=sm_count, major=major, minor=minor,
                                  name=f"fake sm_{major}{minor}a", shared_memory_per_block_optin=232448,
                                  total_memory=1 << 37)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(qu, "_get_device_capacity_cached", lambda device=None: capability))
        stack.enter_context(mock.patch.object(torch.cuda, "get_device_properties", lambda device=None: props))
        stack.enter_context(mock.patch.object(torch.cuda, "get_device_capability", lambda device=None: capability))
        stack.enter_context(mock.patch.object(torch.cuda, "current_device", lambda: 0))
        if hasattr(qu, "get_max_active_clusters"):
            import quack.gemm as qg

            fake = lambda cluster_size=1, *a, **k: sm_count // max(1, int(cluster_size))
            stack.enter_context(mock.patch.object(qu, "get_max_active_clusters", fake))
            stack.enter_context(mock.patch.object(qg, "get_max_active_clusters", fake))
        yield


@contextlib.contextmanager
def capturing_compiles(module):
    """`module.cute.compile` keeps PTX + cubin and appends every compiled object to the yielded list."""
    compile_fn = module.cute.compile
    compiled: list = []

    class Capture:
        def __call__(self, *args, options: str = "", **kwargs):
            result = compile_fn(*args, options=dump_options(f"{options} --keep-ptx --keep-cubin"), **kwargs)
            compiled.append(result)
            return result

        def __getattr__(self, name):
            return getattr(compile_fn, name)

    module.cute.compile = Capture()
    try:
        yield compiled
    finally:
        module.cute.compile = compile_fn


def quack_private_cache_dicts() -> list[dict]:
    """Every compile/plan cache dict of the loaded quack modules: jit_cache closure dicts (one per compile
    function) and module-level `*_plan_cache` dicts."""
    import inspect
    import sys

    caches = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("quack") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, dict) and attr.endswith("_plan_cache"):
                caches.append(value)
            elif callable(value) and hasattr(value, "__wrapped__") and getattr(value, "__closure__", None):
                cache = inspect.getclosurevars(value).nonlocals.get("cache")
                if isinstance(cache, dict):
                    caches.append(cache)
    return list({id(c): c for c in caches}.values())


@contextlib.contextmanager
def quack_private_caches():
    """quack caches compiled kernels at several levels (on disk too when QUACK_CACHE_ENABLED=1, which the
    scripts turn off): empty every cache for the duration and restore it after, so a traced compile
    neither reuses an untraced kernel nor leaks into later untraced calls."""
    import quack.gemm_interface  # noqa: F401  (load the modules whose caches we empty)

    saved = [(c, dict(c)) for c in quack_private_cache_dicts()]
    for c, _ in saved:
        c.clear()
    try:
        yield
    finally:
        for c, entries in saved:
            c.clear()
            c.update(entries)


def quack_compile(trace=None, *, m=4096, n=4096, k=4096, blackwell=False):
    """Compile quack's GEMM through quack.gemm_interface.gemm(A, B, tuned=False) on a CPU (the launch
    that follows fails without a driver and is ignored): its sm90 GEMM, or with `blackwell` (after
    sm100_env(), in a fresh process) its sm100 GEMM. Returns the compiled object."""
    import quack.gemm_tvm_ffi_utils as qt
    import torch
    from quack import gemm_interface
    from torch._subclasses.fake_tensor import FakeTensorMode

    os.environ["QUACK_CACHE_ENABLED"] = "0"
    import quack.cache

    quack.cache.CACHE_ENABLED = False
    device = fake_quack_device(148, (10, 0)) if blackwell else fake_quack_device()
    with device, quack_private_caches(), capturing_compiles(qt) as compiled, FakeTensorMode(), \
            (trace or contextlib.nullcontext()):
        A = torch.empty(m, k, dtype=torch.bfloat16, device="cuda")
        B = torch.empty(k, n, dtype=torch.bfloat16, device="cuda")
        try:
            gemm_interface.gemm(A, B, tuned=False)
        except RuntimeError as e:
            if "cudaErrorInsufficientDriver" not in str(e) and "driver" not in str(e).lower():
                raise
    if len(compiled) != 1:
        raise RuntimeError(f"expected one quack compile, saw {len(compiled)}")
    return compiled[0]


class _FakeB200:
    """What FA4's persistent scheduler asks cutlass.utils.HardwareInfo on a B200 (148 SMs)."""

    def __init__(self, *args, **kwargs):
        pass

    def get_device_multiprocessor_count(self):
        return 148

    def get_max_active_clusters(self, cluster_size=1):
        return 148 // max(1, int(cluster_size))

    def get_l2_cache_size_in_bytes(self):
        return 126 * 1024 * 1024


def sm100_env():
    """Must be set before cutlass / flash_attn are imported (a fresh process)."""
    os.environ["CUTE_DSL_ARCH"] = "sm_100a"
    os.environ["FLASH_ATTENTION_ARCH"] = "sm_100"
    os.environ["FLASH_ATTENTION_NUM_SMS"] = "148"


@contextlib.contextmanager
def fake_b200():
    """FA4's persistent scheduler asks cutlass.utils.HardwareInfo about the device: answer as a B200 would."""
    from unittest import mock

    import cutlass.utils
    import cutlass.utils.hardware_info
    import flash_attn.cute.tile_scheduler as ts

    with contextlib.ExitStack() as stack:
        for module in (cutlass.utils, cutlass.utils.hardware_info, ts):
            stack.enter_context(mock.patch.object(module, "HardwareInfo", _FakeB200))
        yield


def fa4_sm100_compile(trace=None, *, causal=False):
    """Compile FA4's Blackwell forward (FlashAttentionForwardSm100) for sm_100a on a CPU; returns the
    compiled object (PTX + cubin kept). Call sm100_env() first, in a fresh process."""
    with fake_b200():
        return fa4_compile(trace, causal=causal)


def fa4_sm100_bwd_compile(trace=None, *, causal=False) -> list:
    """FA4's Blackwell backward (FlashAttentionBackwardSm100 and its pre/postprocess) for sm_100a on a
    CPU, as fa4_bwd_compile. Call sm100_env() first, in a fresh process."""
    with fake_b200():
        return fa4_bwd_compile(trace, causal=causal)
