"""Compile caches set aside while recording, so that a traced build and an untraced build of one kernel are
never mixed up, in either direction (docs/guides/recording.md, "Compile caches").

What each cache is keyed on, and what is done with it for the time of a recording:

* CuTe DSL in-memory JIT cache (``dsl.jit_cache``, direct ``@cute.jit`` calls; ``cute.compile`` does not use
  it): keyed on the hash of the traced module's bytecode + the compile-affecting environment + the compile
  options. The tracer's hooks and its IR pass run before that hash is computed (the DSL's trace-finalize
  hooks), so a traced module hashes apart from the untraced one (and from any earlier trace: each bakes in the
  pool kernel id it took): no lookup can cross. At the end, the entries of this recording's traced builds are
  deleted (by the hashes their compiles reported), so nothing keeps its buffer alive.
* CuTe DSL on-disk JIT cache ($CUTE_DSL_CACHE_DIR or $TMPDIR/$USER/cutlass_python_cache, same key): turned
  off (``envar.disable_file_caching`` and CUTE_DSL_DISABLE_FILE_CACHING=1): no traced build is written to
  disk, and every traced compile runs its passes (so the audit reads its final PTX).
* FA4 (flash_attn.cute.interface): each ``<function>.compile_cache`` (a JITCache keyed on FA4's compile key:
  dtypes, head dims, causal, tile sizes, ...; with FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 a
  JITPersistentCache that also exports .o files keyed on that key, which knows nothing of tracing): swapped
  for a fresh in-memory cache while recording and swapped back after. FA4 imported while recording reads
  FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=0 (set here) and never touches its disk cache.
* quack (quack.cache): ``jit_cache`` (an in-memory dict per compile function, keyed on its arguments, and
  with QUACK_CACHE_ENABLED=1, the default, .o files under $TMPDIR/$USER/quack_cache keyed on the same
  arguments, loaded before any compile runs) and the ``*_plan_cache`` dicts (plans holding the compiled
  function): ``quack.cache.CACHE_ENABLED`` is False while recording (no disk read or write, no async compile
  pool), and each dict is emptied and given back its entries after.

Every cache is found again before each compile (``refresh``): a library imported while recording is set
aside as well. A kernel that reaches a launch from a cache none of this knows (a program's own dict) is
seen at its launch and reported "launched but not traced" (builds.py).

Invariants (tests/unit/ikp_cute/test_record_caches.py guards each): after a recording, a compile of FA4 or
quack returns an untraced build (never the traced one), and their caches hold exactly what they held before.
"""

from __future__ import annotations

import os
import sys

ENV = {
    "CUTE_DSL_DISABLE_FILE_CACHING": "1",
    "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "0",
    "QUACK_CACHE_ENABLED": "0",
}


def _jit_cache_functions(module) -> list:
    """quack's jit_cache wrappers in `module` (and one class level down): they carry `cache` (a dict) and
    `cache_info`."""
    found = []
    for value in list(vars(module).values()):
        candidates = [value] + (list(vars(value).values()) if isinstance(value, type) else [])
        for c in candidates:
            c = getattr(c, "__func__", c)
            if callable(c) and isinstance(getattr(c, "cache", None), dict) and hasattr(c, "cache_info"):
                found.append(c)
    return found


class CacheGuards:
    """The caches set aside by one recording (see the module docstring)."""

    def __init__(self):
        self.env: dict[str, str | None] = {}
        self.dsl_file_caching = None  # (envar object, its value before)
        self.fa4: list[tuple] = []  # (owner, original compile_cache)
        self.dicts: list[tuple] = []  # (dict, its entries before)
        self.quack_flag = None  # (quack.cache module, CACHE_ENABLED before)
        self.traced_hashes: set[str] = set()
        self.entered = False
        self.quack_before = False

    def enter(self) -> None:
        self.quack_before = "quack.cache" in sys.modules  # else quack reads the environment set here
        for name, value in ENV.items():
            self.env[name] = os.environ.get(name)
            os.environ[name] = value
        self.entered = True
        self.refresh()

    def refresh(self) -> None:
        if not self.entered:
            return
        if self.dsl_file_caching is None and "cutlass.cutlass_dsl" in sys.modules:
            from cutlass.cutlass_dsl import CuTeDSL

            envar = CuTeDSL._get_dsl().envar
            self.dsl_file_caching = (envar, envar.disable_file_caching)
            envar.disable_file_caching = True
        self._fa4()
        self._quack()

    def _fa4(self) -> None:
        interface = sys.modules.get("flash_attn.cute.interface")
        if interface is None:
            return
        cache_utils = sys.modules.get("flash_attn.cute.cache_utils")
        seen = {id(owner) for owner, _ in self.fa4}
        for module in [m for n, m in list(sys.modules.items()) if n.startswith("flash_attn.cute") and m is not None]:
            for owner in list(vars(module).values()):
                if callable(owner) and hasattr(owner, "compile_cache") and id(owner) not in seen:
                    seen.add(id(owner))
                    self.fa4.append((owner, owner.compile_cache))
                    owner.compile_cache = cache_utils.JITCache() if cache_utils is not None else {}

    def _quack(self) -> None:
        state = sys.modules.get("quack.cache")
        if state is None:
            return
        if self.quack_flag is None:
            self.quack_flag = (state, state.CACHE_ENABLED)
            state.CACHE_ENABLED = False
        seen = {id(d) for d, _ in self.dicts}
        for name, module in list(sys.modules.items()):
            if not name.startswith("quack") or module is None:
                continue
            dicts = [f.cache for f in _jit_cache_functions(module)]
            dicts += [v for k, v in vars(module).items() if k.endswith("_plan_cache") and isinstance(v, dict)]
            for d in dicts:
                if id(d) not in seen:
                    seen.add(id(d))
                    self.dicts.append((d, dict(d)))
                    d.clear()

    def traced_compile(self, module_hash: str | None) -> None:
        """A traced build went into the DSL's in-memory cache under `module_hash` (deleted at exit)."""
        if module_hash:
            self.traced_hashes.add(module_hash)

    def exit(self) -> None:
        """Give every cache back what it held before; delete this recording's traced DSL entries."""
        self.refresh()  # caches of libraries imported since the last compile: emptied too
        for owner, original in self.fa4:
            owner.compile_cache = original
        for d, entries in self.dicts:
            d.clear()
            d.update(entries)
        if self.quack_flag is not None:
            state, value = self.quack_flag
            state.CACHE_ENABLED = value
        if self.dsl_file_caching is not None:
            envar, value = self.dsl_file_caching
            envar.disable_file_caching = value
            for h in self.traced_hashes:
                envar_dsl_cache_delete(h)
        for name, value in self.env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.entered = False

    def report(self) -> list[dict]:
        """What was set aside, for the manifest."""
        out = [{"cache": "environment", "action": "set " + ", ".join(f"{k}={v}" for k, v in ENV.items())}]
        if self.dsl_file_caching is not None:
            out.append({"cache": "CuTe DSL on-disk JIT cache", "action": "off while recording"})
            out.append({"cache": "CuTe DSL in-memory JIT cache",
                        "action": f"keyed on the traced module; {len(self.traced_hashes)} traced entries "
                                  "deleted after"})
        if self.fa4:
            kinds = sorted({type(original).__name__ for _, original in self.fa4})
            names = ", ".join(getattr(owner, "__name__", "?") for owner, _ in self.fa4[:3])
            out.append({"cache": f"FA4 compile caches ({len(self.fa4)}: {names}, ...; {', '.join(kinds)})",
                        "action": "each swapped for a fresh in-memory cache while recording, given back after"})
        if self.quack_flag is not None:
            on = self.quack_flag[1] if self.quack_before else self.env.get("QUACK_CACHE_ENABLED") in (None, "1")
            was = "on" if on else "off"
            out.append({"cache": "quack jit_cache and plan caches",
                        "action": f"{len(self.dicts)} dicts emptied while recording and refilled after; its disk "
                                  f"cache off while recording (it was {was})"})
        return out


def envar_dsl_cache_delete(module_hash: str) -> None:
    from cutlass.cutlass_dsl import CuTeDSL

    CuTeDSL._get_dsl().jit_cache.delete(module_hash)
