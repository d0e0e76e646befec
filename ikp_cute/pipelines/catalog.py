"""What was traced: pipelines, their event-id blocks, named barriers (pure Python: no cutlass, no torch).

The catalog is filled while a kernel is traced under ``trace_pipelines`` and becomes the sidecar's
``pipelines`` / ``pipelines_untraced`` / ``barriers`` keys (docs/pipelines.md, "What is recorded" and
"Sidecar keys").

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_catalog.py guards them):
* every (pipeline, op) owns one contiguous block of event ids, id = base + stage, named
  ``<op>_<P>[<stage>]``; named barriers own 16 ids per op (``bar_sync[i]``, ``bar_arrive[i]``);
* ids come from the session's EventRegistry, so they never collide with other events of the capture;
* pipeline names are unique within a catalog and stable for a given kernel source (names.py);
* ``pipelines`` lists only pipelines with at least one traced op (non-empty ``ids``: what the host's
  reader requires); a pipeline seen with no traced op goes to ``pipelines_untraced`` with the reason of
  each op it was seen doing (test_a_pipeline_with_no_traced_op_is_listed_apart);
* ``call_sites`` lists the sites present in the final PTX once the audit has run; the ones the compiler
  removed move to ``removed_sites`` (test_removed_call_sites_move_apart);
* every flag call site has its own event id and one ``flags`` entry; a call described alike at the same site
  shares it (tests/unit/ikp_cute/test_flags_compile.py).
"""

from __future__ import annotations

import dataclasses

from host_decode.load import sidecar
from ikp_cute import inline_ptx

OPS = ("acquire", "wait", "commit", "release", "poll")
LEVELS = sidecar.PIPELINE_LEVELS  # the sidecar's `pipeline_level`: one list for both sides
# Which ops each level records (cumulative). "all" adds `poll` instants (every try_wait, whatever its
# outcome) and region `bar_sync[0]` for __syncthreads.
# Flag signals and waits (docs/flags.md) are recorded at every level: they are rare, and a wait is matched to
# the signal that released it only when both are there.
FLAG_OPS = frozenset({"flag_signal", "flag_wait"})
LEVEL_OPS = {
    "waits": frozenset({"acquire", "wait", "bar_sync"}) | FLAG_OPS,
    "signals": frozenset({"acquire", "wait", "bar_sync", "commit", "release", "bar_arrive"}) | FLAG_OPS,
    "all": frozenset({"acquire", "wait", "bar_sync", "commit", "release", "bar_arrive", "poll", "sync_threads"})
    | FLAG_OPS,
}
NUM_NAMED_BARRIERS = 16


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"trace_pipelines(level={level!r}): expected one of {LEVELS}")
    return level


@dataclasses.dataclass(eq=False)
class Pipeline:
    """One traced pipeline (or a lone mbarrier array that no pipeline object owns). Compared by identity."""

    name: str
    cls: str
    site: str
    num_stages: int
    producer_arrivals: int | None = None
    consumer_arrivals: int | None = None
    tx_bytes: int | None = None
    op_type: str | None = None
    ids: dict[str, int] = dataclasses.field(default_factory=dict)
    call_sites: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # Which CTAs share its barriers: [x, y, z] (the launch's cluster: TMA multicast fills and frees the
    # stage in every CTA of the cluster), "cta" (block-local), None (not known: the host's --cluster).
    cluster: list[int] | str | None = None
    # What frees a stage when no traced signal does: "tma_store" (a TMA-store pipeline's stage is free
    # once the bulk store has read its shared memory; its acquire waits on the TMA unit).
    released_by: str | None = None
    # Stages whose first wait passes (their barrier's wait phase starts one ahead): PipelineOrder's
    # group-0 stages, so that group k's n-th wait is released by group k-1's (n-1)-th arrive there.
    first_wait_passes: list[int] | None = None
    # Ops seen on this pipeline but not recorded, with why ("level waits does not record commit").
    untraced: dict[str, str] = dataclasses.field(default_factory=dict)
    # Traced call sites the compiler removed (in the traced IR, absent from the final PTX).
    removed_sites: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def as_json(self) -> dict:
        out = {
            "name": self.name,
            "class": self.cls,
            "site": self.site,
            "num_stages": self.num_stages,
            "producer_arrivals": self.producer_arrivals,
            "consumer_arrivals": self.consumer_arrivals,
            "tx_bytes": self.tx_bytes,
            "ids": dict(self.ids),
            "call_sites": {op: list(sites) for op, sites in self.call_sites.items()},
        }
        if self.op_type is not None:
            out["op_type"] = self.op_type
        if self.released_by is not None:
            out["released_by"] = self.released_by
        if self.first_wait_passes:
            out["first_wait_passes"] = list(self.first_wait_passes)
        untraced = {op: why for op, why in self.untraced.items() if op not in self.ids}
        if untraced:
            out["untraced"] = untraced
        if any(self.removed_sites.values()):
            out["removed_sites"] = {op: list(sites) for op, sites in self.removed_sites.items() if sites}
        if self.cluster == "cta":
            out["scope"] = "cta"
        elif self.cluster is not None:
            out["cluster"] = list(self.cluster)
        return out


@dataclasses.dataclass
class FlagSite:
    """One traced flag call site (the sidecar's `flags` entry, host_decode.load.sidecar.FLAG_SITE)."""

    id: int
    kind: str  # signal | wait
    op: str  # the library function, ikp_cute.flags.signal / wait, or the IR op
    site: str  # file.py:line
    order: str
    scope: str
    update: str | None = None  # signals: add | store
    value: int | str | None = None  # signals: the constant per lane, or "recorded"
    cmp: str | None = None  # waits: ge | eq | lt
    expected: int | str | None = None  # waits: the constant, or "recorded"
    reset: int | str | None = None  # atom.cas waits that change the flag: the constant, or "recorded"

    @property
    def label(self) -> str:
        return f"{self.kind}@{self.site}"

    def as_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


class FlagSites:
    """The flag call sites of a trace, one event id each (`<kind>@<file>:<line>` in the session's registry;
    a second, different call on the same line is `<kind>@<file>:<line>#2`)."""

    def __init__(self, events):
        self.events = events
        self.sites: dict[str, FlagSite] = {}

    def register(self, kind: str, site: str, **fields) -> FlagSite:
        """The entry of this call (made on first sight); a call described alike at the same site shares it."""
        n = 1
        while True:
            name = f"{kind}@{site}" + (f"#{n}" if n > 1 else "")
            known = self.sites.get(name)
            if known is None:
                entry = FlagSite(self.events.id(name), kind, site=site, **fields)
                self.sites[name] = entry
                return entry
            if known == FlagSite(known.id, kind, site=site, **fields):
                return known
            n += 1

    def metadata(self) -> list[dict]:
        return [entry.as_json() for entry in self.sites.values()]


def _description(pipe: Pipeline) -> tuple:
    """What a freshly made pipeline is (before ids, call sites and a unique name are added)."""
    return (pipe.name, pipe.cls, pipe.site, pipe.num_stages, pipe.producer_arrivals, pipe.consumer_arrivals,
            pipe.tx_bytes, pipe.op_type, str(pipe.cluster), pipe.released_by, tuple(pipe.first_wait_passes or ()))


class Catalog:
    """Pipelines and barriers seen while tracing, with their id blocks in `events` (an EventRegistry)."""

    def __init__(self, events, level: str = "waits", ops=None):
        self.events = events
        self.level = check_level(level)
        known = LEVEL_OPS["all"]
        if ops is not None and not set(ops) <= known:
            raise ValueError(
                f"trace_pipelines(ops=...): unknown ops {sorted(set(ops) - known)}; known: {sorted(known)}")
        self.ops = None if ops is None else frozenset(ops)
        self.pipelines: dict[object, Pipeline] = {}  # one Pipeline may sit under keys of several kernels
        self._kernels: dict[object, object] = {}  # key -> the kernel op that made it
        self._described: list[tuple] = []  # (Pipeline, its description when made): the distinct entries, in order
        self.barrier_ids: dict[str, int] = {}
        self.barrier_names: dict[int, str] = {}
        self.barrier_sites: dict[str, list[str]] = {}
        self.barrier_removed: dict[str, list[str]] = {}
        self.flags = FlagSites(events)

    def records(self, op: str) -> bool:
        return op in LEVEL_OPS[self.level] and (self.ops is None or op in self.ops)

    def why_not(self, op: str) -> str:
        """Why `op` is not recorded (for the sidecar's reasons); "" when it is."""
        if op not in LEVEL_OPS[self.level]:
            return f"level {self.level} does not record {op}"
        if self.ops is not None and op not in self.ops:
            return f"ops= leaves out {op}"
        return ""

    def note_untraced(self, pipe: Pipeline, op: str) -> str:
        """Remember that `pipe` was seen doing `op`, which the level / ops= does not record; the reason."""
        reason = self.why_not(op)
        if reason:
            pipe.untraced.setdefault(op, reason)
        return reason

    def _unique(self, name: str) -> str:
        taken = {p.name for p in self.pipelines.values()}
        if name not in taken:
            return name
        n = 2
        while f"{name}_{n}" in taken:
            n += 1
        return f"{name}_{n}"

    def pipeline(self, key, make, kernel=None) -> Pipeline:
        """The pipeline registered under `key`, created by `make()` (-> Pipeline) on first sight. The
        same kernel traced again (a second compile, the trace entered again) makes new barrier objects:
        a pipeline described exactly like one of an earlier kernel (`kernel`: the kernel op being traced)
        and not yet taken in this one takes that one's entry, name and ids, instead of a renamed copy
        (`data_2`) beside a stale one."""
        if key not in self.pipelines:
            pipe = make()
            described = _description(pipe)
            taken_here = [p for k, p in self.pipelines.items() if inline_ptx.same_op(self._kernels[k], kernel)]
            earlier = [p for p, d in self._described if d == described and not any(p is q for q in taken_here)]
            if earlier and kernel is not None:
                pipe = earlier[0]
            else:
                self._described.append((pipe, described))
                pipe.name = self._unique(pipe.name)
            self.pipelines[key] = pipe
            self._kernels[key] = kernel
        return self.pipelines[key]

    def _block(self, names: list[str]) -> int:
        """Ids for `names` from the registry; they must come out contiguous (id = base + index)."""
        ids = [self.events.id(n) for n in names]
        if ids != list(range(ids[0], ids[0] + len(ids))):
            raise ValueError(
                f"trace_pipelines: event ids for {names[0]}..{names[-1]} are not contiguous ({ids}); "
                "declare the session's other events after tracing, or pin them above the pipelines' ids"
            )
        return ids[0]

    def op_base(self, pipe: Pipeline, op: str, site: str) -> int:
        """Base id of `op` on `pipe` (allocated on first use), and remember the call site."""
        if op not in pipe.ids:
            pipe.ids[op] = self._block([f"{op}_{pipe.name}[{s}]" for s in range(pipe.num_stages)])
        sites = pipe.call_sites.setdefault(op, [])
        if site not in sites:
            sites.append(site)
        return pipe.ids[op]

    def barrier_base(self, op: str, site: str, barrier_id=None, name: str | None = None) -> int:
        """Base id of `bar_sync` / `bar_arrive` (16 ids each, id = base + barrier id)."""
        if op not in self.barrier_ids:
            self.barrier_ids[op] = self._block([f"{op}[{i}]" for i in range(NUM_NAMED_BARRIERS)])
        sites = self.barrier_sites.setdefault(op, [])
        if site not in sites:
            sites.append(site)
        if isinstance(barrier_id, int) and name and barrier_id not in self.barrier_names:
            self.barrier_names[barrier_id] = name
        return self.barrier_ids[op]

    def mark_removed(self, sites: list[tuple]) -> None:
        """The audit's verdict: these (pipeline or None for a named barrier, op, site) call sites are in the
        traced IR but not in the final PTX. They leave `call_sites` for `removed_sites`."""
        for pipe, op, where in sites:
            present = pipe.call_sites.get(op, []) if pipe is not None else self.barrier_sites.get(op, [])
            removed = (pipe.removed_sites if pipe is not None else self.barrier_removed).setdefault(op, [])
            if where in present:
                present.remove(where)
            if where not in removed:
                removed.append(where)

    def metadata(self) -> dict:
        """The sidecar keys of the contract (docs/pipelines.md, "Sidecar keys"): `pipelines` (each with at
        least one traced op), `pipelines_untraced`, `barriers` (when traced), `pipeline_level`."""
        entries = [p.as_json() for p, _ in self._described]
        out: dict = {"pipelines": [e for e in entries if e["ids"]], "pipeline_level": self.level}
        untraced = [{key: e[key] for key in ("name", "class", "site", "num_stages", "untraced", "removed_sites")
                     if key in e} for e in entries if not e["ids"]]
        for entry in untraced:
            entry.setdefault("untraced", {})
        if untraced:
            out["pipelines_untraced"] = untraced
        if self.barrier_ids:
            out["barriers"] = {
                "base_sync": self.barrier_ids.get("bar_sync"),
                "base_arrive": self.barrier_ids.get("bar_arrive"),
                "names": {str(k): v for k, v in sorted(self.barrier_names.items())},
                "call_sites": {op: list(s) for op, s in self.barrier_sites.items()},
            }
            if any(self.barrier_removed.values()):
                out["barriers"]["removed_sites"] = {op: list(s) for op, s in self.barrier_removed.items() if s}
        if self.flags.sites:
            out["flags"] = self.flags.metadata()
        return out
