"""Where the recorder meets the CuTe DSL: every compile, every launch and every binary load of the process.

* compiles: the DSL's ``generate_original_ir`` (a module traced: the recorder starts its pool trace on the first
  one, and notes the pool kernel ids the tracer took while it ran) and ``compile_and_cache`` (that module
  compiled: registered as a build with those ids; a trace the DSL's in-memory cache answered has no compile);
* launches: ``__call__``, ``run_compiled_program`` and ``to`` of JitCompiledFunction, JitExecutor and all
  their subclasses (TVM-FFI's included), with a per-thread guard so one launch counts once however the
  DSL's launch paths nest (a direct ``@cute.jit`` call runs ``run_compiled_program``);
* binary loads: ``ExternalBinaryModule`` (cute.runtime.load_module): what it hands out is registered as a
  build "loaded from a binary", a bare ``tvm_ffi.Function`` wrapped so that its launches are seen.
* the DSL itself: installed when ``cutlass`` is imported (``after_import``), so a program that never
  imports it pays nothing.

Everything is undone by ``uninstall`` (attributes restored only where they are still ours). Guarded by
tests/unit/ikp_cute/test_record_runtime.py (every launch counted once; a build compiled before the
recording is reported untraced).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import threading

from .builds import compile_arguments

LAUNCH_METHODS = ("__call__", "run_compiled_program")
_state = threading.local()


class _Patches:
    """(owner, attribute, original, replacement) set by us; restored in reverse order."""

    def __init__(self):
        self.items: list[tuple] = []

    def set(self, owner, name: str, replacement) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        setattr(owner, name, replacement)
        self.items.append((owner, name, original, replacement, isinstance(owner, type)))

    def patched(self, owner, name: str) -> bool:
        return any(o is owner and n == name for o, n, *_ in self.items)

    def restore(self) -> None:
        for owner, name, original, replacement, is_class in reversed(self.items):
            current = owner.__dict__.get(name) if is_class else owner.__dict__.get(name, None)
            if current is replacement:
                if is_class:
                    setattr(owner, name, original)
                else:
                    delattr(owner, name)  # an instance attribute: the class's method shows again
        self.items.clear()


class UntracedBinary:
    """A function loaded from a compiled binary whose calls the DSL's Python launch path does not see (a bare
    ``tvm_ffi.Function``): calls pass through, each one reported first."""

    def __init__(self, function, report):
        self.function = function
        self.report = report

    def __call__(self, *args, **kwargs):
        if self.report(self):
            return None
        return self.function(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.function, name)


def subclasses(root) -> list:
    out, todo = [], [root]
    while todo:
        cls = todo.pop()
        if cls not in out:
            out.append(cls)
            todo.extend(cls.__subclasses__())
    return out


class DslHooks:
    """The hooks of one recording (see the module docstring). `recorder` provides before_compile(),
    after_compile(compiled, function_name, module_hash), on_launch(obj) -> skip, on_load(function, where)."""

    def __init__(self, recorder):
        self.recorder = recorder
        self.patches = _Patches()
        self.installed = False

    def install(self) -> None:
        from cutlass.cutlass_dsl import CuTeDSL

        for name in ("cutlass.cutlass_dsl.cuda_jit_executor", "cutlass.cutlass_dsl.tvm_ffi_provider"):
            try:  # the launch classes they define must exist before the scan
                importlib.import_module(name)
            except ImportError:
                pass
        dsl = CuTeDSL._get_dsl()
        self.dsl = dsl
        self.patches.set(dsl, "generate_original_ir", self.hook_generate(dsl.generate_original_ir))
        self.patches.set(dsl, "compile_and_cache", self.hook_compile(dsl.compile_and_cache))
        self.refresh()
        self.hook_loads()
        self.installed = True

    def uninstall(self) -> None:
        self.patches.restore()
        self.installed = False

    def refresh(self) -> None:
        """Hook the launch methods of launch classes defined since (subclasses made later)."""
        from cutlass.base_dsl.jit_executor import JitCompiledFunction, JitExecutor

        for root in (JitCompiledFunction, JitExecutor):
            for cls in subclasses(root):
                for name in LAUNCH_METHODS:
                    if name in cls.__dict__ and not self.patches.patched(cls, name):
                        self.patches.set(cls, name, self.hook_launch(cls.__dict__[name]))
                if "to" in cls.__dict__ and issubclass(cls, JitCompiledFunction) \
                        and not self.patches.patched(cls, "to"):
                    self.patches.set(cls, "to", self.hook_to(cls.__dict__["to"]))

    # --- compiles --------------------------------------------------------------------------------------

    def hook_generate(self, original):
        recorder = self.recorder

        def generate_original_ir(*args, **kwargs):
            mark = recorder.before_trace()
            generated = original(*args, **kwargs)
            recorder.after_trace(generated, mark)
            return generated

        return generate_original_ir

    def hook_compile(self, original):
        recorder = self.recorder
        hooks = self

        def compile_and_cache(module, module_hash, function_name, *args, **kwargs):
            try:
                compiled = original(module, module_hash, function_name, *args, **kwargs)
            except BaseException:
                recorder.compile_failed(module)
                raise
            hooks.refresh()
            arguments = compile_arguments(kwargs.get("full_args"), kwargs.get("full_kwargs"))
            recorder.after_compile(compiled, function_name, module_hash, module, arguments)
            return compiled

        return compile_and_cache

    def cached(self, module_hash):
        """The build the DSL's in-memory JIT cache holds for `module_hash`, or None."""
        dsl = getattr(self, "dsl", None)
        try:
            return dsl.jit_cache.get(module_hash) if module_hash and dsl is not None else None
        except Exception:  # noqa: BLE001
            return None

    # --- launches --------------------------------------------------------------------------------------

    def hook_launch(self, original):
        recorder = self.recorder

        def launch(obj, *args, **kwargs):
            if getattr(_state, "depth", 0):
                return original(obj, *args, **kwargs)
            _state.depth = 1
            try:
                if recorder.on_launch(obj):
                    return None  # a dry run: intercepted, skipped
                return original(obj, *args, **kwargs)
            finally:
                _state.depth = 0

        launch.__name__ = getattr(original, "__name__", "launch")
        return launch

    def hook_to(self, original):
        recorder = self.recorder

        def to(compiled, *args, **kwargs):
            executor = original(compiled, *args, **kwargs)
            recorder.builds.alias(executor, compiled)
            return executor

        return to

    # --- binaries --------------------------------------------------------------------------------------

    def hook_loads(self) -> None:
        try:
            from cutlass.base_dsl.export.external_binary_module import ExternalBinaryModule
        except ImportError:
            return
        recorder = self.recorder
        paths: dict[int, str] = {}
        init = ExternalBinaryModule.__dict__["__init__"]

        def __init__(module, file_path, *args, **kwargs):
            init(module, file_path, *args, **kwargs)
            paths[id(module)] = str(file_path)

        def wrap(original):
            def lookup(module, name):
                function = original(module, name)
                where = f"{paths.get(id(module), '?')}:{name}"
                return recorder.on_load(function, where)

            return lookup

        self.patches.set(ExternalBinaryModule, "__init__", __init__)
        for name in ("__getattr__", "__getitem__"):
            if name in ExternalBinaryModule.__dict__:
                self.patches.set(ExternalBinaryModule, name, wrap(ExternalBinaryModule.__dict__[name]))


class AfterImport(importlib.abc.MetaPathFinder):
    """Run `callback(module)` right after module `name` is first imported (at once if it already is)."""

    def __init__(self, name: str, callback):
        self.name, self.callback, self.busy = name, callback, False

    def install(self) -> None:
        if self.name in sys.modules:
            self.callback(sys.modules[self.name])
        else:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy = False
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenLoader(spec.loader, self)
        return spec


class _ThenLoader(importlib.abc.Loader):
    def __init__(self, loader, finder: AfterImport):
        self.loader, self.finder = loader, finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.finder.remove()
        self.finder.callback(module)

    def __getattr__(self, name):
        return getattr(self.loader, name)
