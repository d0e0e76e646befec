"""`ikp view` serves the trace to its user only: a random token in the URL it prints (a request without it,
or without the cookie the first tokened request sets, gets 403), a Host check against DNS rebinding, no
directory listings, no symlink followed out of the UI folder, a trace checked before it is served, client
disconnects silent, and a folder viewed as other commands read it (host_decode/reports/viewer.py)."""

from __future__ import annotations

import gzip
import http.client
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from host_decode.reports import viewer
from tests.support.view import fake_ui

ROOT = Path(__file__).resolve().parents[4]
CAPTURE = ROOT / "examples" / "basic" / "capture.npy"


def request(server, path: str, host: str | None = None, cookie: str | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Host": host or f"127.0.0.1:{server.port}"}
    if cookie:
        headers["Cookie"] = cookie
    conn.request("GET", path, headers=headers)
    r = conn.getresponse()
    out = r.status, r.read(), r.headers
    conn.close()
    return out


@pytest.fixture()
def running(tmp_path):
    trace = tmp_path / "data" / "t.pftrace"
    trace.parent.mkdir()
    viewer_trace = viewer.trace_to_serve(CAPTURE, trace.parent)
    (tmp_path / "secret.txt").write_text("not to be served")
    ui = fake_ui(tmp_path)
    (ui / "planted").symlink_to(tmp_path / "secret.txt")
    (ui / "planted_dir").symlink_to(tmp_path)
    server = viewer.ViewerServer(viewer.PerfettoUi.create(ui), viewer_trace, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)[viewer.TOKEN_PARAM][0]


def test_requests_without_the_token_get_403(running):
    server = running
    url = server.viewer_url()
    token = token_of(url)
    assert len(token) >= 20
    for path in ("/", "/index.html", "/v99.0-test/trace_processor.wasm", urlsplit(server.trace_url()).path,
                 f"/?{viewer.TOKEN_PARAM}=wrong"):
        assert request(server, path)[0] == 403, path
    status, body, headers = request(server, f"/?{viewer.TOKEN_PARAM}={token}")
    assert status == 200 and b"fake ui" in body
    cookie = headers["Set-Cookie"].split(";")[0]
    assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
    # the UI's own requests carry the cookie: its assets and the trace (the URL in the fragment has the token)
    assert request(server, "/v99.0-test/trace_processor.wasm", cookie=cookie)[0] == 200
    trace_url = parse_qs(url.split("#", 1)[1].split("?", 1)[1])["url"][0]
    parts = urlsplit(trace_url)
    status, body, _ = request(server, parts.path + "?" + parts.query)
    assert status == 200 and body == server.trace_path.read_bytes()


def test_a_foreign_host_header_is_refused(running):
    server = running
    token = token_of(server.viewer_url())
    path = f"/?{viewer.TOKEN_PARAM}={token}"
    assert request(server, path, host=f"attacker.example:{server.port}")[0] == 403
    assert request(server, path, host="attacker.example")[0] == 403
    for host in (f"localhost:{server.port}", "127.0.0.1:18080", "localhost"):  # an ssh tunnel may use another port
        assert request(server, path, host=host)[0] == 200, host


def test_no_listings_and_no_symlinks_out_of_the_ui(running):
    server = running
    cookie = request(server, f"/?{viewer.TOKEN_PARAM}={token_of(server.viewer_url())}")[2]["Set-Cookie"].split(";")[0]
    for path in ("/v99.0-test/", "/planted", "/planted_dir/secret.txt", "/planted_dir/"):
        status, body, _ = request(server, path, cookie=cookie)
        assert status == 404 and b"not to be served" not in body and b"Directory listing" not in body, path


def test_the_trace_is_checked_before_it_is_served(tmp_path):
    rng = np.random.default_rng(0)
    junk = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    cases = {"r.pftrace": junk, "r.json": junk, "r.json.gz": gzip.compress(junk), "r.pftrace.gz": gzip.compress(junk),
             "t.json": b'{"not": "a trace"}', "b.pftrace.gz": b"\x1f\x8bnot gzip"}
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(viewer.ViewerError) as e:
            viewer.trace_to_serve(p, tmp_path)
        assert str(p) in str(e.value), (name, e.value)
    good = viewer.trace_to_serve(CAPTURE, tmp_path)  # a real .pftrace: served as it is
    assert viewer.trace_to_serve(good, tmp_path / "unused") == good
    chrome = tmp_path / "c.json"
    chrome.write_text('{"traceEvents": [{"name": "x", "ph": "X", "ts": 0, "dur": 1, "pid": 0, "tid": 0}]}')
    assert viewer.trace_to_serve(chrome, tmp_path / "unused") == chrome


def test_a_folder_is_viewed_as_other_commands_read_it(tmp_path):
    session = tmp_path / "session"
    session.mkdir()
    for name in ("launch_0", "launch_1"):
        for suffix in (".npy", ".json"):
            shutil.copy(ROOT / "examples" / "insight" / f"{name}{suffix}", session / f"{name}{suffix}")
    work = tmp_path / "work"
    work.mkdir()
    out = viewer.trace_to_serve(session, work)
    assert out.parent == work and out.suffix == ".pftrace" and out.stat().st_size > 0
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    shutil.copy(out, recorded / "trace.pftrace")
    (recorded / "index.json").write_text("{}")
    assert viewer.trace_to_serve(recorded, work) == recorded / "trace.pftrace"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(Exception, match="no capture") as e:
        viewer.trace_to_serve(empty, work)
    assert str(empty) in str(e.value)


def test_dropped_downloads_are_silent(tmp_path):
    pytest.importorskip("viztracer", reason="the [view] extra (viztracer) is not installed")
    code = "import sys; from host_decode.cli import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", code, "view", str(CAPTURE), "--no-browser", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
    try:
        url = proc.stdout.readline().strip()
        trace_url = urlsplit(parse_qs(url.split("#", 1)[1].split("?", 1)[1])["url"][0])
        port = urlsplit(url).port
        for _ in range(50):  # ask for the trace, read a little, drop the connection hard
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(f"GET {trace_url.path}?{trace_url.query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            s.recv(16)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        time.sleep(1.0)
    finally:
        proc.send_signal(2)
        proc.wait(timeout=20)
    err = proc.stderr.read()
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err, err[:2000]
