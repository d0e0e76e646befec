"""Flags in global memory: signal and spin-wait helpers for hand-written loops, and the buffers a flag can lie in.

In a kernel (docs/flags.md)::

    ikp_cute.flags.signal(ready.iterator + m)                       # red.release.gpu.global.add.s32 [..], 1
    ikp_cute.flags.signal(done_ptr, epoch, op="store", scope="sys")   # st.release.sys.global.b32
    seen = ikp_cute.flags.wait(ready.iterator + m, n_tiles)         # ld.acquire.gpu until >= n_tiles

Outside a trace they compile to exactly the plain instructions: `signal` to the one update, `wait` to the loop a
kernel writes by hand (`v = load(); while v < value: v = load()`, the load with `sem` and `scope`). Inside
``trace_pipelines`` (or any trace of the pipelines tracer) they add the records of docs/flags.md: a signal's
INSTANT and FLAG_ADDR (+ FLAG_VALUE), a wait's BEGIN / END and FLAG_ADDR (+ FLAG_VALUE) when it blocked. The
primitives of cutlass.utils.distributed (red_add1, spin_lock_*_wait) need none of this: the tracer hooks them.

On the host, where a recorded address lies: ``register_buffer(name, tensor)`` names a local buffer of flags,
``register_symmetric(name, tensor, handle)`` every rank's copy of a torch symmetric-memory buffer (the handle of
``torch.distributed._symmetric_memory.rendezvous``), and ``watch_symmetric_memory()`` registers every buffer
rendezvoused from then on (named ``symm0``, ``symm1``, ... in rendezvous order, the same on every rank; a
``register_symmetric`` of the same buffer renames it). A trace's ``save`` writes them as the sidecar's
``flag_buffers``; ``trace_pipelines`` starts watching when it is entered.

Invariants a change could break (tests/unit/ikp_cute/test_flags_compile.py, test_flags_buffers.py guard them):
* outside a trace the helpers' PTX equals the hand-written code's; inside, the records are there;
* a registered buffer keeps one entry per (name, owner rank); re-registering replaces it.
"""

from __future__ import annotations

import threading

SIGNAL_OPS = ("add", "store")
ORDERS = ("relaxed", "release")
SEMS = ("relaxed", "acquire")
SCOPES = ("cta", "cluster", "gpu", "sys")
CMPS = ("ge", "eq", "lt")


def _check(call: str, name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"ikp_cute.flags.{call}: {name}={value!r}; expected one of {allowed}")


def signal(ptr, value=1, *, op: str = "add", scope: str = "gpu", order: str = "release") -> None:
    """Signal a flag: add `value` to it (op="add", a `red.add.s32`) or store `value` (op="store", an `st.b32`),
    with `order` ("release" by default: the writes before it are visible to whoever sees the flag change) at
    `scope`. `ptr`: a cute Pointer to an Int32 in global memory (peer memory included)."""
    _check("signal", "op", op, SIGNAL_OPS)
    _check("signal", "order", order, ORDERS)
    _check("signal", "scope", scope, SCOPES)
    from .pipelines import active_tracer
    from .pipelines.flag_ops import FlagCall
    from .pipelines.flag_ops import signal as plain_signal

    call = FlagCall("signal", order, scope, update=op)
    tracer = active_tracer()
    if tracer is None or tracer.depth or not tracer.in_kernel():
        return plain_signal(ptr, value, call)
    with tracer.nested():
        return tracer.flags.signal(ptr, value, call, f"ikp_cute.flags.signal({op})")


def wait(ptr, value, *, cmp: str = "ge", scope: str = "gpu", sem: str = "acquire"):
    """Spin until the Int32 flag at `ptr` satisfies `cmp` with `value` ("ge": >=, "eq": ==, "lt": <), loading it
    with `sem` ("acquire" by default: what the signaller wrote before its release is visible after the wait;
    "relaxed": add a fence yourself) at `scope`. Returns the value that ended the wait."""
    _check("wait", "cmp", cmp, CMPS)
    _check("wait", "sem", sem, SEMS)
    _check("wait", "scope", scope, SCOPES)
    from .pipelines import active_tracer
    from .pipelines.flag_ops import FlagCall, spin

    call = FlagCall("wait", sem, scope, probe="ld", cmp=cmp)
    tracer = active_tracer()
    if tracer is None or tracer.depth or not tracer.in_kernel():
        return spin(ptr, value, value, call)
    with tracer.nested():
        return tracer.flags.wait(ptr, value, value, call, "ikp_cute.flags.wait")


# --- the buffers a flag can lie in (host) ------------------------------------------------------------------------

_LOCK = threading.Lock()
_BUFFERS: list[dict] = []
_WATCH = {"installed": False, "count": 0}


def _rank() -> int:
    try:
        import torch.distributed as dist

        return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else 0
    except ImportError:
        return 0


def _entry(name: str, owner_rank: int, base: int, nbytes: int, elem_bytes: int) -> dict:
    if not isinstance(name, str) or not name:
        raise ValueError(f"ikp_cute.flags: a buffer's name must be a non-empty string, got {name!r}")
    if base < 0 or nbytes < 1 or elem_bytes < 1 or owner_rank < 0:
        raise ValueError(f"ikp_cute.flags: buffer {name!r}: base {base}, {nbytes} bytes, {elem_bytes}-byte "
                         f"elements, owner rank {owner_rank}: expected base >= 0, sizes >= 1, rank >= 0")
    return {"name": name, "owner_rank": int(owner_rank), "base": int(base), "bytes": int(nbytes),
            "elem_bytes": int(elem_bytes)}


def _add(entries: list[dict]) -> list[dict]:
    """Keep one entry per (name, owner rank) and per (base, owner rank): a newer one replaces both."""
    with _LOCK:
        for new in entries:
            _BUFFERS[:] = [e for e in _BUFFERS if (e["name"], e["owner_rank"]) != (new["name"], new["owner_rank"])
                           and (e["base"], e["owner_rank"]) != (new["base"], new["owner_rank"])]
            _BUFFERS.append(new)
    return entries


def register_buffer(name: str, tensor, owner_rank: int | None = None) -> dict:
    """Name a buffer of flags of this process (a torch tensor, or anything with data_ptr(), numel() and
    element_size()): recorded addresses inside it become (name, owner rank, offset in elements) on the host.
    owner_rank: the rank whose memory holds it (default: this process's rank, 0 without torch.distributed)."""
    rank = _rank() if owner_rank is None else int(owner_rank)
    elem = int(tensor.element_size())
    return _add([_entry(name, rank, int(tensor.data_ptr()), int(tensor.numel()) * elem, elem)])[0]


def register_symmetric(name: str, tensor, handle) -> list[dict]:
    """Name every rank's copy of a symmetric-memory tensor: `handle` is what
    torch.distributed._symmetric_memory.rendezvous(tensor, group) returned (its buffer_ptrs, in this process's
    address space, one per rank, and its rank); the tensor may start inside its allocation (the same offset
    on every rank)."""
    ptrs = [int(p) for p in handle.buffer_ptrs]
    here = int(handle.rank)
    offset = int(tensor.data_ptr()) - ptrs[here]
    elem = int(tensor.element_size())
    size = int(tensor.numel()) * elem
    return _add([_entry(name, r, p + offset, size, elem) for r, p in enumerate(ptrs)])


def registered() -> list[dict]:
    """The buffers registered in this process (the sidecar's `flag_buffers`), in registration order."""
    with _LOCK:
        return [dict(e) for e in _BUFFERS]


def clear() -> None:
    """Forget every registered buffer (their memory was freed)."""
    with _LOCK:
        _BUFFERS.clear()
        _WATCH["count"] = 0


def watch_symmetric_memory() -> bool:
    """From now on, register every tensor given to torch.distributed._symmetric_memory.rendezvous as
    ``symm<k>`` (k counts this process's rendezvous calls; rendezvous is collective, so the names agree across
    ranks). Idempotent; False when torch has no symmetric memory (nothing installed)."""
    with _LOCK:
        if _WATCH["installed"]:
            return True
        try:
            import torch.distributed._symmetric_memory as symm
        except ImportError:
            return False
        original = symm.rendezvous

        def rendezvous(tensor, *args, **kwargs):
            handle = original(tensor, *args, **kwargs)
            with _LOCK:
                k = _WATCH["count"]
                _WATCH["count"] += 1
            try:
                register_symmetric(f"symm{k}", tensor, handle)
            except (AttributeError, TypeError, ValueError, IndexError) as e:  # a handle without buffer_ptrs
                import warnings

                warnings.warn(f"ikp_cute.flags: symmetric buffer symm{k} not registered ({e}); flags in it will "
                              "keep their raw addresses", stacklevel=2)
            return handle

        rendezvous.ikp_original = original
        symm.rendezvous = rendezvous
        _WATCH["installed"] = True
        return True
