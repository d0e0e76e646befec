"""ikp view FILE: open a capture or a trace in the Perfetto UI served from this machine (host_decode.reports.viewer)."""

NAME = "view"
EXAMPLE = "ikp view examples/basic/capture.npy   (prints the URL; Ctrl-C stops)"
HELP = "open a capture (.npy) or trace (.pftrace / .json) in a Perfetto UI served offline from this machine"


def add_arguments(p) -> None:
    from host_decode.cli.common import add_names, number

    p.add_argument("file", help="capture BUFFER.npy (decoded to a temporary .pftrace), "
                   "or a .pftrace / .json trace (served as is)")
    p.add_argument("--port", type=number(int, at_least=0, below=65536), default=0,
                   help="TCP port to serve on (default 0: a free port)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--no-browser", action="store_true", help="only print the URL; do not open a browser")
    add_names(p, "a capture")


def run(args) -> int:
    from host_decode.load.inputs import read_names
    from host_decode.reports.viewer import serve

    names = read_names(args.names)
    return serve(args.file, port=args.port, bind=args.bind, open_browser=not args.no_browser, names=names,
                 verbose=args.verbose)
