"""The public host API: every name in host_decode.__all__ imports (in a fresh interpreter, and with
numpy as the only third-party package), is the object its module defines, `from host_decode import *`
works, and `import host_decode` stays cheap (no numpy until a name is used). The same lazy mechanism
(host_decode.core.lazy) serves ikp_cute, whose import pulls in neither torch nor cutlass."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from host_decode.core.lazy import lazy_exports
from tests.support.numpy_only import BLOCKED  # what host_decode must work without

ROOT = Path(__file__).resolve().parents[3]
README_NAMES = {"decode", "load_capture", "save_capture", "write_trace", "Trace", "LossReport", "DecodeError", "Names"}


def run_fresh(body: str, block: list[str] | None = None) -> str:
    """Run `body` in a new interpreter (optionally with `block` made unimportable); -> its stdout."""
    guard = ""
    if block:
        guard = textwrap.dedent(f"""
            class Block:
                def find_spec(self, name, path=None, target=None):
                    if name.split(".")[0] in {block!r}:
                        raise ImportError("blocked for this test: " + name)
            sys.meta_path.insert(0, Block())
        """)
    script = "import sys\n" + guard + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_all_names_import_in_a_fresh_interpreter():
    out = run_fresh("""
        import host_decode as h
        assert "numpy" not in sys.modules, "import host_decode imported numpy"
        values = [getattr(h, n) for n in h.__all__]
        assert all(v is not None for v in values)
        print(" ".join(h.__all__))
    """)
    names = set(out.split())
    assert README_NAMES <= names, README_NAMES - names


def test_star_import_with_numpy_alone():
    out = run_fresh("""
        from host_decode import *
        import host_decode
        missing = [n for n in host_decode.__all__ if n not in globals()]
        assert not missing, missing
        bad = [m for m in sys.modules if m.split(".")[0] in BLOCKED]
        assert not bad, bad
        print("ok")
    """.replace("BLOCKED", repr(BLOCKED)), block=BLOCKED)
    assert out.strip() == "ok"


def test_public_names_are_their_modules_objects():
    import host_decode
    from host_decode.analysis.stats import region_summary
    from host_decode.core.decoder import decode
    from host_decode.core.errors import DecodeError
    from host_decode.core.model import LossReport, Names, Trace
    from host_decode.load.capture import load_capture, save_capture
    from host_decode.writers import write_trace
    from host_decode.writers.options import TraceOptions

    expected = dict(decode=decode, load_capture=load_capture, save_capture=save_capture, write_trace=write_trace,
                    TraceOptions=TraceOptions, region_summary=region_summary, Trace=Trace, LossReport=LossReport,
                    DecodeError=DecodeError, Names=Names)
    assert sorted(host_decode.__all__) == sorted(expected)
    for name, obj in expected.items():
        assert getattr(host_decode, name) is obj, name
    assert set(host_decode.__all__) <= set(dir(host_decode))


def test_public_api_round_trip(tmp_path):
    """The README's flow through the top-level names only: save, load, decode, write, summarize."""
    import host_decode as hd
    from tests.support.buffers import B, BufferBuilder, E

    b = BufferBuilder(2, 2, 8)
    for lane in range(4):
        b.put(lane, 10, 1, B).put(lane, 20, 2, B).put(lane, 30, 2, E).put(lane, 40, 1, E)
    path = hd.save_capture(tmp_path / "cap.npy", b.buf, names={"events": {1: "outer", 2: "inner"}})
    trace = hd.load_capture(path)
    assert isinstance(trace, hd.Trace) and isinstance(trace.loss, hd.LossReport) and isinstance(trace.names, hd.Names)
    assert trace.spans.size == 8 and trace.loss.lost == 0
    assert trace.names.event(2) == "inner"
    assert hd.decode(b.buf).spans.size == 8
    assert hd.region_summary(trace).size == 4
    hd.write_trace(trace, tmp_path / "t.json")
    assert (tmp_path / "t.json").stat().st_size > 0
    hd.write_trace(trace, tmp_path / "t.pftrace", hd.TraceOptions(slice_args=True, lane_counters="on"))
    assert (tmp_path / "t.pftrace").stat().st_size > 0
    with pytest.raises(hd.DecodeError):
        hd.decode(b.buf[:2])


def test_unknown_name_is_an_attribute_error():
    import host_decode

    with pytest.raises(AttributeError, match="no attribute 'decoder_of_nothing'"):
        host_decode.decoder_of_nothing  # noqa: B018
    assert not hasattr(host_decode, "does_not_exist")


def test_lazy_exports_refuses_a_malformed_table():
    with pytest.raises(ValueError, match="'module:attribute'"):
        lazy_exports("host_decode", {"x": "host_decode.core.model.Trace"})


def test_ikp_cute_imports_without_torch_or_cutlass():
    out = run_fresh("""
        import ikp_cute
        heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "cutlass"})
        assert not heavy, heavy
        assert {"Profiler", "Session", "profile_region", "fake_buffer"} <= set(dir(ikp_cute))
        print("ok")
    """)
    assert out.strip() == "ok"
