"""Barrier sites: every mbarrier / named-barrier operation of a traced kernel, what it is, and its identity.

A *site* is one barrier operation of the kernel's MLIR (an nvvm op, or an ``llvm.inline_asm`` whose PTX
holds a barrier instruction), numbered per module in program order (from the module's content alone: two
traced compiles of one kernel give identical IR, so the DSL's JIT cache, keyed on the module, serves the
second; the hooked calls' location names are numbered per module too). Its number travels to the final PTX
in the operation's source location: ``file:line:col`` with the kernel's own file and line and
``col = SITE_COLUMN + number``. With line info in the compile (audit.py turns it on for traced compiles: it
changes no SASS, see docs/pipelines.md), ptxas-ready PTX carries ``.loc <file> <line> <col>`` before each
instruction, so each barrier instruction of the final PTX names its site: how the audit tells a traced
instruction from an untraced one, counts the copies an unrolled loop made, and finds the sites the compiler
removed.

What is audited (``classify``, one table for MLIR ops and one set of patterns for PTX text):
mbarrier waits, try_waits / test_waits (polls: they return the phase's state), arrives (with
expect_tx, drop, ``cp.async.mbarrier.arrive``, ``tcgen05.commit``'s arrive), a lone expect_tx, and the
named barriers ``bar.sync`` / ``barrier.sync`` / ``bar.red`` (``bar_sync``; ``sync_threads`` when it has no
id) and ``bar.arrive`` / ``barrier.arrive`` (``bar_arrive``); flags in global memory (docs/flags.md): a red /
atom / store with release order (``flag_signal``), and an atom.cas or a relaxed / acquire / volatile load whose
value decides whether its loop goes on (``flag_wait``: a spin loop's probe; ``in_spin_loop``). Not audited:
mbarrier init / inval / fences, the TMA unit's ``complete_tx``, cluster barriers (``barrier.cluster.*``),
``bar.warp.sync``.

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_ir.py, test_pipelines_compile.py):
* the MLIR table and the PTX patterns agree on each kind (test_classify_ops_and_ptx);
* a site number survives to the PTX as the ``.loc`` column (test_every_barrier_instruction_names_its_site);
* two traced compiles of one kernel give the same module (test_pool_compile.py::test_a_retrace_is_the_same_module);
* a hooked call's barrier ops are tagged with the hook's site, pipeline and op (test_fa4_sm90_coverage).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re

from . import names

SITE_COLUMN = 32768  # .loc column of a site = SITE_COLUMN + its number (LLVM keeps 16-bit columns)
MAX_SITES = 65535 - SITE_COLUMN

KINDS = ("wait", "poll", "arrive", "expect_tx", "bar_sync", "sync_threads", "bar_arrive", "flag_signal", "flag_wait")
FLAG_KINDS = ("flag_signal", "flag_wait")  # flags in global memory (flag_kind below; docs/flags.md)
_WAITS = ("nvvm.mbarrier.try_wait.parity", "nvvm.mbarrier.try_wait", "nvvm.mbarrier.try_wait.parity.timelimit",
          "nvvm.mbarrier.try_wait.timelimit", "nvvm.mbarrier.wait", "nvvm.mbarrier.wait.parity",
          "nvvm.mbarrier.test.wait")
_ARRIVES = ("nvvm.mbarrier.arrive", "nvvm.mbarrier.arrive.expect_tx", "nvvm.mbarrier.arrive.nocomplete",
            "nvvm.mbarrier.arrive_drop", "nvvm.mbarrier.arrive_drop.expect_tx", "nvvm.mbarrier.arrive_drop.nocomplete",
            "nvvm.cp.async.mbarrier.arrive", "nvvm.tcgen05.commit")
OP_KINDS = {
    **{name: "wait" for name in _WAITS},  # "poll" when the op returns the phase's state
    **{name: "arrive" for name in _ARRIVES},
    "nvvm.mbarrier.expect_tx": "expect_tx",
    "nvvm.barrier": "bar_sync",  # "sync_threads" without a barrier id
    "nvvm.barrier0": "sync_threads",
    "nvvm.barrier.cta.sync": "bar_sync",
    "nvvm.barrier.cta.red": "bar_sync",
    "nvvm.barrier.arrive": "bar_arrive",
    "nvvm.barrier.cta.arrive": "bar_arrive",
}
# The same kinds in PTX text (an instruction, or an inline-PTX block's text).
PTX_KINDS = (
    ("wait", re.compile(r"\bmbarrier\.(?:try_wait|test_wait|wait)\b")),
    ("arrive", re.compile(r"\bmbarrier\.arrive|\bcp\.async\.mbarrier\.arrive|\btcgen05\.commit\S*mbarrier::arrive")),
    ("expect_tx", re.compile(r"\bmbarrier\.expect_tx\b")),
    ("bar_sync", re.compile(r"\b(?:bar|barrier)(?:\.cta)?\.(?:sync|red)\b")),
    ("bar_arrive", re.compile(r"\b(?:bar|barrier)(?:\.cta)?\.arrive\b")),
    # flags: a CAS or a load that orders or bypasses (a spin's probe, a wait when in a spin loop), then any
    # red / atom / st with release semantics (a signal); records' own `ld.volatile.shared` are not probes
    ("flag_wait", re.compile(r"\batom(?:\.[\w:]+)*\.cas\b|\bld(?:\.[\w:]+)*\.(?:acquire|relaxed)\b"
                             r"|\bld\.volatile\.global\b")),
    ("flag_signal", re.compile(r"\b(?:red|atom)(?:\.[\w:]+)*\.(?:release|acq_rel)\b|\bst(?:\.[\w:]+)*\.release\b")),
)
_ORDER = re.compile(r"<(\w+)>")
_ATOMIC_OP = re.compile(r"atomic_op (\w+)")
RELEASING = ("release", "acq_rel")
PROBING = ("relaxed", "acquire")
# Instructions a pure wait / barrier block of inline PTX may hold besides its barrier instruction.
_PLAIN = re.compile(r"^(?:@!?\S+\s+)?(?:mbarrier\.|bar\.|barrier\.|bra|setp\.|mov\.|selp\.|elect\.|not\.|and\.|"
                    r"or\.|cvt\.|add\.|ret|\.reg|\{|\})")


def ptx_kind(text: str) -> str | None:
    """The audited kind of a PTX instruction (or block of them), None when it is none."""
    for kind, pattern in PTX_KINDS:
        if pattern.search(text):
            return kind
    return None


@dataclasses.dataclass(eq=False)
class Site:
    """One barrier operation of a traced kernel (sidecar `barrier_sites`, docs/pipelines.md)."""

    number: int
    kind: str  # one of KINDS
    site: str  # file.py:line of the kernel code that made it
    instruction: str  # the MLIR op name ("llvm.inline_asm" for the kernel's own PTX)
    pipeline: object = None  # catalog.Pipeline, None for a named barrier or an unattributed one
    op: str | None = None  # acquire | wait | commit | release | poll | bar_sync | bar_arrive | sync_threads
    barrier: int | None = None  # a named barrier's id when static
    traced: bool = False
    via: str | None = None  # "hooks" (the Python hooks) | "ir" (the IR pass)
    reason: str = ""  # why not traced; "" when traced
    by_choice: bool = False  # not traced because the level / options say so
    label: str = ""  # the records' label (op_P@site) when traced
    kernel: str = ""  # the kernel's symbol (cuda.kernel / PTX .entry)
    ptx: int | None = None  # barrier instructions of the final PTX naming this site; None: PTX not read

    def as_json(self) -> dict:
        out = {"number": self.number, "kernel": self.kernel, "kind": self.kind, "site": self.site,
               "instruction": self.instruction,
               "pipeline": getattr(self.pipeline, "name", None), "op": self.op, "traced": self.traced,
               "via": self.via, "reason": self.reason, "ptx": self.ptx}
        if self.barrier is not None:
            out["barrier"] = self.barrier
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class HookCall:
    """What a hooked call was classified as; the barrier ops it builds become sites with these fields."""

    site: str  # file.py:line
    path: str
    line: int
    pipeline: object = None
    op: str | None = None
    barrier: object = None
    traced: bool = False
    reason: str = ""
    by_choice: bool = False
    label: str = ""


_CALL = "ikp.call."  # the location name of the ops a hooked call builds: ikp.call.<index of its HookCall>


class Ledger:
    """The sites of a trace, numbered per module in order of discovery, and the hooked calls of the module being
    traced.

    While a hooked call builds its ops they get the location ``ikp.call.<k>("file":line:0)`` (`marking`),
    whatever the DSL would have given them, so the IR pass can tell them apart wherever they end up (an
    ``if`` lifted around them, a nested region); the IR pass then numbers every barrier op (``number``)."""

    def __init__(self):
        self.sites: list[Site] = []
        self.calls: list[HookCall] = []
        self.marker = None  # the location of the hooked call being built, None between calls
        self.module: list[Site] = []  # the sites of the module being numbered, by number
        self.audited: dict[tuple, list] = {}  # (kernel, its sites' identities) -> their PTX counts, per earlier compile

    def new(self, kind: str, where: str, instruction: str, **fields) -> Site | None:
        if len(self.module) >= MAX_SITES:
            return None
        site = Site(len(self.module), kind, where, instruction, **fields)
        self.sites.append(site)
        self.module.append(site)
        return site

    def end_module(self) -> None:
        """A module's sites are numbered: the next module numbers its own from 0, and its hooked calls too. A
        kernel whose sites are those of an earlier compile of it (the same code) takes their PTX counts: if the
        DSL's JIT cache serves the module (the same module: nothing is compiled, no PTX read), they are this
        compile's; if it compiles, the audit counts again."""
        for kernel in dict.fromkeys(site.kernel for site in self.module):
            now = [site for site in self.module if site.kernel == kernel]
            counts = self.audited.get((kernel, tuple(map(_identity, now))))
            for site, ptx in zip(now, counts or ()):
                site.ptx = ptx
        self.module = []
        self.calls = []

    def of(self, op) -> Site | None:
        """The site of the module being numbered that an op's location names (None for any other op)."""
        loc = file_location(op.location)
        if loc is None or loc.start_col < SITE_COLUMN:
            return None
        number = loc.start_col - SITE_COLUMN
        return self.module[number] if number < len(self.module) else None

    def call_of(self, op) -> HookCall | None:
        """The hooked call that built `op` (None when no hook did)."""
        loc = op.location
        for _ in range(8):
            if loc is None or not loc.is_a_name():
                return None
            if loc.name_str.startswith(_CALL):
                index = int(loc.name_str[len(_CALL):])
                return self.calls[index] if index < len(self.calls) else None
            loc = loc.child_loc
        return None

    def number(self, op, site: Site, path: str, line: int) -> None:
        """Give `op` the location that carries `site`'s number (the kernel's file and line)."""
        from cutlass._mlir import ir

        op.location = ir.Location.file(path, max(int(line), 0), SITE_COLUMN + site.number, context=op.context)

    def drop_kernel(self, kernel: str) -> None:
        """A kernel compiled again: its earlier compile's sites give way to the new ones (their PTX counts kept
        for a compile of the same code: end_module)."""
        earlier = [site for site in self.sites if site.kernel == kernel]
        if any(site.ptx is not None for site in earlier):
            self.audited[(kernel, tuple(map(_identity, earlier)))] = [site.ptx for site in earlier]
        self.sites = [site for site in self.sites if site.kernel != kernel]

    @contextlib.contextmanager
    def marking(self, call: HookCall):
        """Within: the ops built get `call`'s location (see the class docstring); nested calls keep the
        outermost one's."""
        from cutlass._mlir import ir

        if self.marker is not None or ir.Context.current is None:
            yield
            return
        self.calls.append(call)
        child = ir.Location.file(call.path, max(int(call.line), 0), 0)
        self.marker = ir.Location.name(f"{_CALL}{len(self.calls) - 1}", childLoc=child)
        try:
            with self.marker:
                yield
        finally:
            self.marker = None


def _identity(site: Site) -> tuple:
    return (site.number, site.kind, site.site, site.instruction, site.op, site.traced, site.label)


def walk(op) -> list:
    """`op` and every op nested in it, in program order (pre-order)."""
    out = [op]
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                out.extend(walk(inner.operation))
    return out


def asm_text(op) -> str | None:
    """The PTX text of an inline-asm op (None for any other op)."""
    from cutlass._mlir import ir

    if op.name != "llvm.inline_asm":
        return None
    return ir.StringAttr(op.attributes["asm_string"]).value


def attribute(op, name: str) -> str | None:
    """The word inside an enum attribute (`#nvvm.mem_order<release>` -> "release"), None when absent."""
    if name not in op.attributes:
        return None
    text = str(op.attributes[name])
    found = _ATOMIC_OP.search(text) or _ORDER.search(text)
    return found.group(1) if found else text


def flag_kind(op) -> str | None:
    """flag_signal: an nvvm red / atomicrmw (not a CAS) / store with release or acq_rel order; flag_wait: an
    nvvm atom.cas, or a load with relaxed or acquire order, whose value decides whether its loop goes on (a
    spin: in_spin_loop); None otherwise."""
    name = op.name
    if name == "nvvm.atomicrmw" and attribute(op, "op") == "cas":
        return "flag_wait" if in_spin_loop(op) else None
    if name in ("nvvm.red", "nvvm.atomicrmw"):
        return "flag_signal" if attribute(op, "memOrder") in RELEASING else None
    if name == "nvvm.store.ext":
        return "flag_signal" if attribute(op, "order") in RELEASING else None
    if name == "nvvm.load.ext" and (attribute(op, "order") in PROBING or attribute(op, "cacheModifier") == "cv"):
        return "flag_wait" if in_spin_loop(op) else None
    return None


def in_spin_loop(op, limit: int = 64) -> bool:
    """`op`'s result decides whether the nearest scf.while around it goes on: it reaches that loop's
    scf.condition, through the values it is computed into, the ifs that yield it and the loop's own carried
    values (a probe in the loop's body is yielded, becomes an argument of its condition block, is compared)."""
    loop = _parent(op)
    while loop is not None and loop.name not in ("scf.while", "cuda.kernel", "func.func"):
        loop = _parent(loop)
    if loop is None or loop.name != "scf.while" or not len(op.results):
        return False
    seen: set = set()  # hashes: MLIR values hash by identity (the DSL overloads their ==)
    todo = [op.results[0]]
    while todo and len(seen) < limit:
        value = todo.pop()
        if hash(value) in seen:
            continue
        seen.add(hash(value))
        for use in value.uses:
            user = getattr(use.owner, "operation", use.owner)
            owner = _parent(user)
            if user.name == "scf.condition" and owner == loop:
                return True
            if user.name == "scf.yield":
                if owner == loop:  # carried into the condition block's arguments
                    todo.append(loop.regions[0].blocks[0].arguments[use.operand_number])
                elif owner is not None and owner.name == "scf.if":
                    todo.append(owner.results[use.operand_number])
                continue
            todo.extend(user.results)
    return False


def _parent(op):
    parent = op.parent
    return getattr(parent, "operation", parent) if parent is not None else None


def classify(op) -> str | None:
    """The audited kind of an MLIR op (KINDS), None for any other op (ours included)."""
    name = op.name
    flag = flag_kind(op) if name.startswith("nvvm.") else None
    if flag is not None:
        return flag
    kind = OP_KINDS.get(name)
    if kind == "wait" and len(op.results):
        return "poll"
    if kind == "bar_sync" and name == "nvvm.barrier" and not len(op.operands):
        return "sync_threads"
    if kind is not None or name != "llvm.inline_asm":
        return kind
    text = asm_text(op)
    if "/* ikp" in text:
        return None
    kind = ptx_kind(text)
    if kind == "wait" and len(op.results):
        return "poll"
    if kind == "flag_wait" and not in_spin_loop(op):
        return None
    return kind


def mixed_with(op) -> str | None:
    """For inline PTX: the first instruction that is not part of a plain wait / arrive / barrier (the
    block then times that work too, and is not traced as a wait), None for a plain block."""
    text = asm_text(op) or ""
    for piece in re.split(r"[;\n]", text):
        piece = piece.strip()
        if not piece or piece.endswith(":") or piece.startswith("//"):
            continue
        piece = re.sub(r"^\S+:\s*", "", piece)  # a label before the instruction
        if piece and not _PLAIN.match(piece):
            return re.sub(r"^@!?\S+\s+", "", piece).split()[0]  # its mnemonic, past a predicate
    return None


def file_location(loc):
    """The file:line:col location inside `loc` (through names, call sites, fusions); None if none."""
    for _ in range(8):
        if loc is None:
            return None
        if loc.is_a_file():
            return loc
        if loc.is_a_name():
            loc = loc.child_loc
        elif loc.is_a_callsite():
            loc = loc.callee
        elif loc.is_a_fused():
            found = [file_location(inner) for inner in loc.locations]
            return next((f for f in found if f is not None), None)
        else:
            return None
    return None


@contextlib.contextmanager
def kernel_locations(ledger: Ledger):
    """While a kernel is traced: every op the DSL builds without a source location (no line info asked)
    gets its call site's file:line (names.user_frame), through the DSL's own location hook
    (`loc_transform`), and within a hooked call that call's marker (Ledger.marking). The IR pass names the
    sites it finds by these locations."""
    from cutlass._mlir import ir
    from cutlass._mlir_helpers.op import loc_transform

    cache: dict = {}

    def locate(loc):
        if ledger.marker is not None:
            return ledger.marker
        if loc is not None:
            return loc
        context = ir.Context.current
        frame = names.user_frame(depth=3) if context is not None else None
        if frame is None:
            return loc
        if cache.get("context") is not context:
            cache.clear()
            cache["context"] = context
        key = (frame.f_code.co_filename, frame.f_lineno)
        found = cache.get(key)
        if found is None:
            found = cache[key] = ir.Location.file(key[0], key[1], 0)
        return found

    with loc_transform(locate):
        yield
