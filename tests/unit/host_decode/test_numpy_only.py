"""host_decode imports and works with numpy alone: every module imports, and decode, stats and both
trace writers run, with torch, CuTe DSL and the optional libraries made unimportable."""

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.numpy_only import BLOCKED

ROOT = Path(__file__).resolve().parents[3]


def test_host_decode_needs_only_numpy(tmp_path):
    script = textwrap.dedent(f"""
        import importlib, pkgutil, sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {BLOCKED!r}:
                    raise ImportError("blocked for this test: " + name)
        sys.meta_path.insert(0, Block())
        import host_decode, host_decode.cli.commands
        for pkg in (host_decode, host_decode.cli.commands):
            for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
                importlib.import_module(m.name)
        sys.path.insert(0, {str(ROOT)!r})
        from tests.support.buffers import BufferBuilder, B, E
        from host_decode.core.decoder import decode
        from host_decode.analysis.stats import region_summary
        from host_decode.writers import write_trace
        b = BufferBuilder(2, 2, 8)
        for lane in range(4):
            b.put(lane, 10, 1, B).put(lane, 20, 2, B).put(lane, 30, 2, E).put(lane, 40, 1, E)
        t = decode(b.buf)
        assert region_summary(t).size == 4  # 2 groups x 2 regions
        write_trace(t, {str(tmp_path / 'x.pftrace')!r})
        write_trace(t, {str(tmp_path / 'x.json')!r})
        assert not any(m.split(".")[0] in {BLOCKED!r} for m in sys.modules)
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")
