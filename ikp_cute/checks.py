"""Trace-time misuse checks of the device API: what a Profiler remembers while a kernel is traced (plain
Python, nothing reaches the kernel), and the call site every ``ProfileUsageError`` names.

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_device_compile.py):
* Misuse that is visible while tracing is a trace-time error naming the call: end() without the token a
  mode needs, begin/end names or Profilers that disagree, an end at another control-flow level than its
  begin where the mode needs them together, a region left open at finalize(), a record after finalize()
  (test_misuse_is_a_trace_time_error, test_misuse_that_is_fine_compiles: the negative controls).
* The site is the kernel's own file:line: frames of the device API (this module, ikp_cute/profiler.py,
  ikp_cute/window.py, ikp_cute/inline_ptx.py, ikp_cute/recorders/) and of the DSL are skipped, a user
  folder that happens to be named "cutlass..." is not (test_usage_errors_name_the_call_site,
  test_source_site_keeps_a_user_file_under_a_cutlass_named_folder).
"""

from __future__ import annotations

import dataclasses
import inspect

from .spec import ProfileUsageError

# the device API's own modules: a call site is the first frame outside them
_API_MODULES = ("ikp_cute.checks", "ikp_cute.profiler", "ikp_cute.window", "ikp_cute.inline_ptx")
_API_PACKAGES = ("ikp_cute.recorders",)
_DSL_PACKAGES = ("cutlass", "nvidia_cutlass_dsl")  # the DSL's own frames (a user path may say "cutlass")


def _in_api(frame: inspect.FrameInfo) -> bool:
    module = frame.frame.f_globals.get("__name__", "")
    return (
        module in _API_MODULES
        or module.startswith(tuple(p + "." for p in _API_PACKAGES))
        or module.split(".")[0] in _DSL_PACKAGES
    )


def source_site() -> str:
    """file:line of the kernel code that made the profiling call (for trace-time errors): the first frame
    above the caller of this function that belongs neither to the device API nor to the DSL."""
    for frame in inspect.stack()[2:]:
        if not _in_api(frame):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


@dataclasses.dataclass(frozen=True)
class RegionToken:
    """What begin() returns and end() takes: the region's name, where it was opened (MLIR block), and
    the mode's value (atomic: reserved slot + begin time; static: slot; deferred: slot + time)."""

    name: str
    value: object
    block: object
    site: str
    records_before: int  # the Profiler's records traced up to and including this begin
    owner: object  # the Profiler's trace-time checks: a token is only good for the Profiler that made it


class TraceChecks:
    """Trace-time bookkeeping of one Profiler: open regions, records traced, where finalize() was."""

    def __init__(self):
        self.open: dict[int, RegionToken] = {}
        # modes without tokens: region name -> site of a begin traced after the name's last end (an end
        # without a token may close a begin of another block, so only a name never ended again is sure)
        self.unended: dict[str, str] = {}
        self.finalized_at: str | None = None
        self.records = 0  # begin / end / mark calls traced so far

    def check_not_finalized(self, call: str):
        if self.finalized_at is not None:
            raise ProfileUsageError(
                f"{call} at {source_site()} comes after prof.finalize() at {self.finalized_at}: a record after "
                "FINALIZE would not be counted; record before finalize()"
            )

    def opened(self, token: RegionToken, needs_token: bool):
        """Remember a begin: by its token (modes whose end takes it) or by its name (the others)."""
        if needs_token:
            self.open[id(token)] = token
        else:
            self.unended.setdefault(token.name, token.site)

    def check_end(self, name: str, token, mode: str, needs_token: bool, block):
        """The end of region `name` with `token` (None: no token given) at MLIR block `block`."""
        if token is None:
            if needs_token:
                raise ProfileUsageError(
                    f"prof.end({name!r}) at {source_site()}: mode {mode!r} needs the token begin() returned "
                    f"(t = prof.begin({name!r}) ... prof.end({name!r}, t)); or use `with prof.region({name!r}):`"
                )
            return
        if not isinstance(token, RegionToken):
            raise ProfileUsageError(
                f"prof.end({name!r}, token) at {source_site()}: token must be what prof.begin() returned "
                f"(got {type(token).__name__})"
            )
        if token.name != name:
            raise ProfileUsageError(
                f"prof.end({name!r}) at {source_site()} closes the region begun as {token.name!r} at {token.site}"
            )
        if token.owner is not self:
            raise ProfileUsageError(
                f"prof.end({name!r}) at {source_site()} closes a region begun at {token.site} by another Profiler: "
                "end a region with the Profiler that began it"
            )
        if needs_token:
            if id(token) not in self.open:
                raise ProfileUsageError(
                    f"prof.end({name!r}) at {source_site()}: the region begun at {token.site} is already closed"
                )
            if token.block != block:
                raise ProfileUsageError(
                    f"prof.end({name!r}) at {source_site()} is not at the control-flow level of its begin at "
                    f"{token.site}: in mode {mode!r} a begin whose end does not run would vanish; "
                    "close the region in the same block (or use `with prof.region(...)`)"
                )
            del self.open[id(token)]

    def ended(self, name: str):
        self.records += 1
        self.unended.pop(name, None)

    def check_finalize(self):
        """Every region closed, then finalize() remembered (nothing may be recorded after it)."""
        self.check_not_finalized("prof.finalize()")
        if self.open:
            token = next(iter(self.open.values()))
            raise ProfileUsageError(
                f"prof.finalize() at {source_site()}: region {token.name!r} begun at {token.site} was never ended"
            )
        if self.unended:
            name, site = next(iter(self.unended.items()))
            raise ProfileUsageError(
                f"prof.finalize() at {source_site()}: region {name!r} begun at {site} was never ended"
            )
        self.finalized_at = source_site()
