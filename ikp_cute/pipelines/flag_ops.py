"""Flag signals and spin waits as device code, plain or with their records (docs/flags.md).

One description per call (`FlagCall`: what the call does to memory, fixed at trace time) and one emitter per
kind: `signal` (the flag's update, the time read just before it, the records after it) and `spin` (a wait:
probe the flag until its value satisfies the condition). Without a `FlagRecords` they emit exactly the plain
operations: `spin` is then the loop a kernel writes by hand (probe first, or the library's form that checks
an initial value before the first probe), `signal` the one update. With one, the memory operations are the
same, in the same order, with the same order and scope (the first probe of a wait is peeled out of its loop so
that a wait that passed costs one timer read and the compare it made anyway), plus the records:

* signal: INSTANT at the time read just before the update, FLAG_ADDR, and FLAG_VALUE when the amount is not
  the site's constant: a value that is not a compile-time constant, or an add made by several lanes of the
  warp on the same flag (the amount of all of them: lanes counted with match.any);
* wait that blocked (its first probe failed): BEGIN (the time before the first probe), END (the time after
  the probe that saw the value), FLAG_ADDR, FLAG_VALUE for the expected value and for an atom.cas's reset
  value when they are not constants; slots reserved when the first probe failed (record.py,
  KernelState.record_with_payload), so all the bookkeeping happens while the wait is blocked anyway. With
  `passing` (level "all") every wait is recorded.

Used by the tracer's hooks of cutlass.utils.distributed (hooks.py, patches.TABLE) and by ikp_cute.flags.

Invariants a change could break (tests/unit/ikp_cute/test_flags_compile.py guards them):
* without records, `spin` compiles to the PTX of the hand-written loop and `signal` to the plain update;
* with records, the memory operations of the flag (kind, order, scope) are those of the plain call, and a
  wait that passed runs one timer read and its compare before the branch to the blocked path.
"""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import Int32, Int64, cute

from ikp_cute import inline_ptx

PROBES = ("ld", "cas")
CMPS = ("ge", "eq", "lt")
UPDATES = ("add", "store")


@dataclasses.dataclass(frozen=True)
class FlagCall:
    """What a flag call does to memory (compile-time). Signals: `update` ("add": `red.add`, "store": `st`)
    with `order` and `scope`. Waits: `probe` ("ld": a load with `order`, "cas": an `atom.cas` with `order`,
    exchanging the expected value for the reset value) until the value satisfies `cmp` with the expected
    value ("ge", "eq", "lt"); `initial`: None to probe first, or a value checked before the first probe (the
    library's loops start from 0)."""

    kind: str
    order: str
    scope: str
    update: str | None = None
    probe: str | None = None
    cmp: str | None = None
    initial: int | None = None

    def __post_init__(self):
        if self.kind == "signal" and self.update not in UPDATES:
            raise ValueError(f"flag signal: update={self.update!r}; expected one of {UPDATES}")
        if self.kind == "wait" and (self.probe not in PROBES or self.cmp not in CMPS):
            raise ValueError(f"flag wait: probe={self.probe!r}, cmp={self.cmp!r}; expected {PROBES} and {CMPS}")


@dataclasses.dataclass(frozen=True)
class FlagRecords:
    """Where and how a traced call records: the kernel's record state, the event bits of its site, its label
    (PTX comments `/* ikp <label> ... */`), which values go into FLAG_VALUE payloads (`expected` / `reset` for
    a wait, `value` for a signal: True when not a compile-time constant) and whether a wait that passed is
    recorded (`passing`)."""

    state: object  # record.KernelState
    bits: int  # (event id << 2) | type: INSTANT for a signal, BEGIN for a wait
    label: str
    record_value: bool = False
    record_expected: bool = False
    record_reset: bool = False
    passing: bool = False


def address_of(ptr):
    """The flag's address as an Int64 (a cute Pointer)."""
    return Int64(ptr.toint())


# --- signals --------------------------------------------------------------------------------------------------


def update(ptr, value, call: FlagCall) -> None:
    """The plain update: `red.add` (as cutlass.utils.distributed.red_add1 builds it) or a store."""
    if call.update == "add":
        cute.arch.red(ptr.llvm_ptr, Int32(value), op="add", dtype="s32", sem=call.order, scope=call.scope)
    else:
        cute.arch.store(ptr.llvm_ptr, Int32(value), sem=call.order, scope=call.scope)


def signal(ptr, value, call: FlagCall, records: FlagRecords | None = None, run=None) -> None:
    """A signal: `run()` (the caller's own update, e.g. the library function) or update(); with `records`, the
    time read just before it and its records after it (module docstring)."""
    def run_update():
        return update(ptr, value, call) if run is None else run()

    if records is None:
        run_update()
        return
    time = records.state.timer(f"{records.label} time")
    run_update()
    record_signal(records, time, address_of(ptr), value, call.update)


def record_signal(records: FlagRecords, time, address, value, update_kind: str) -> None:
    """A signal's records, after its update (`time`: read just before it; `address`: an Int64)."""
    state = records.state
    if update_kind == "add":
        amount = lanes_on_flag(address) * Int32(value)
        if records.record_value:
            state.record_with_payload(records.bits, time, address, [amount], label=records.label)
        else:  # the site's constant per lane: FLAG_VALUE only when several lanes added together
            several = Int32(amount != Int32(value))
            state.record_with_payload(records.bits, time, address, optional=(several, amount), label=records.label)
    else:
        values = [Int32(value)] if records.record_value else []
        state.record_with_payload(records.bits, time, address, values, label=records.label)


def lanes_on_flag(address):
    """How many active lanes of the warp make this call on the same address (match.any.sync, sm_70+)."""
    text = "{ .reg .b32 m, s; activemask.b32 m; match.any.sync.b64 s, $1, m; popc.b32 $0, s; } /* ikp lanes */"
    return Int32(inline_ptx.asm(Int32.mlir_type, [Int64(address)], text, "=r,l"))


# --- waits ----------------------------------------------------------------------------------------------------


@cute.jit
def probe(ptr, expected, reset, call: cutlass.Constexpr):
    """One probe of the flag: the value it read (a load, or the value an atom.cas found)."""
    if cutlass.const_expr(call.probe == "ld"):
        seen = cute.arch.load(ptr.llvm_ptr, Int32, sem=call.order, scope=call.scope)
    else:
        seen = cute.arch.atomic_cas(ptr=ptr.llvm_ptr, cmp=Int32(expected), val=Int32(reset), sem=call.order,
                                    scope=call.scope)
    return seen


@cute.jit
def waiting(seen, expected, call: cutlass.Constexpr):
    """The wait goes on: `seen` does not satisfy the condition (the negation, as a hand-written loop tests it)."""
    if cutlass.const_expr(call.cmp == "ge"):
        go_on = seen < expected
    elif cutlass.const_expr(call.cmp == "eq"):
        go_on = seen != expected
    else:
        go_on = seen >= expected
    return go_on


@cute.jit
def spin(ptr, expected, reset, call: cutlass.Constexpr, records: cutlass.Constexpr = None):
    """A wait (module docstring); returns the value that ended it."""
    if cutlass.const_expr(records is None):
        seen = first_probe(ptr, expected, reset, call)
        while waiting(seen, expected, call):
            seen = probe(ptr, expected, reset, call)
    else:
        begin = records.state.timer(f"{records.label} begin-time")
        seen = first_probe(ptr, expected, reset, call)
        if cutlass.const_expr(records.passing):
            token = reserve_wait(ptr, expected, reset, begin, records)
            while waiting(seen, expected, call):
                seen = probe(ptr, expected, reset, call)
            records.state.finish_region(token, label=f"{records.label} end")
        else:
            if waiting(seen, expected, call):  # the first probe failed: the wait blocked
                token = reserve_wait(ptr, expected, reset, begin, records)
                while waiting(seen, expected, call):
                    seen = probe(ptr, expected, reset, call)
                records.state.finish_region(token, label=f"{records.label} end")
    return seen


@cute.jit
def first_probe(ptr, expected, reset, call: cutlass.Constexpr):
    """The value the loop starts from: a probe, or (the library's form) `initial`, probed when it does not
    already satisfy the condition."""
    if cutlass.const_expr(call.initial is None):
        seen = probe(ptr, expected, reset, call)
    else:
        seen = Int32(call.initial)
        if waiting(seen, expected, call):
            seen = probe(ptr, expected, reset, call)
    return seen


def reserve_wait(ptr, expected, reset, begin, records: FlagRecords):
    """The wait's slots (BEGIN, END, FLAG_ADDR, FLAG_VALUE of the expected and reset values when recorded)."""
    values = ([Int32(expected)] if records.record_expected else []) + ([Int32(reset)] if records.record_reset else [])
    return records.state.record_with_payload(records.bits, begin, address_of(ptr), values, region=True,
                                             label=f"{records.label} begin")
