"""`ikp` command line. Each subcommand is a module in host_decode/cli/commands/ exposing NAME, HELP,
EXAMPLE, add_arguments(parser) and run(args) -> exit code; this file only discovers them, so that
commands stay independent (and cheap to import: heavy imports belong inside run()). Shared flags and
helpers live in host_decode/cli/common.py.

Invariants (tests/unit/host_decode/cli/test_cli_grammar.py, tests/unit/host_decode/cli/test_cli_errors.py):
- subcommands are listed in workflow order (WORKFLOW; commands added later follow, alphabetically);
- bad input exits 2 with one line `ikp CMD: error: ...` naming the file; Ctrl-C exits 130 with one line,
  and so does SIGTERM (timeout, Slurm, systemd): both leave no output behind
  (tests/unit/host_decode/cli/test_cli_safety.py);
- `ikp --version` prints the package version;
- without -v/--verbose no library warning or internal line reaches the terminal
  (tests/unit/host_decode/cli/test_quiet_terminal.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from host_decode.cli import commands
from host_decode.cli.common import add_quiet, add_read_limits, add_verbose
from host_decode.core.compressed import read_limits
from host_decode.core.errors import DecodeError
from host_decode.core.files import terminate_as_interrupt

WORKFLOW = ("decode", "stats", "report", "view", "waits", "diff", "merge", "kernels", "pc2region", "join", "plot")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ikp-cute")
    except Exception:  # running from a checkout that is not installed
        return "unknown (not installed)"


class _PrintVersion(argparse.Action):
    """--version, reading the package metadata only when asked: importlib.metadata costs every command
    ~4 MB of memory and ~25 ms at start."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show program's version number and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"ikp {_version()}")
        parser.exit()


def _modules(only: str | None = None) -> list:
    """The command modules in workflow order; `only`: just that command's, when a file of that name
    defines it (the others are not imported: each costs its compile at every start)."""
    if only is not None and only in _command_files():
        module = importlib.import_module(f"{commands.__name__}.{only}")
        if getattr(module, "NAME", None) == only and hasattr(module, "run"):
            return [module]
    found = {}
    for name in _command_files():
        module = importlib.import_module(f"{commands.__name__}.{name}")
        if hasattr(module, "NAME") and hasattr(module, "run"):
            found[module.NAME] = module
    rank = {name: i for i, name in enumerate(WORKFLOW)}
    return [found[n] for n in sorted(found, key=lambda n: (rank.get(n, len(WORKFLOW)), n))]


def _command_files() -> list[str]:
    """Module names of the command files (a directory listing: pkgutil.iter_modules imports inspect,
    ~15 ms at every start)."""
    return sorted(f[:-3] for d in commands.__path__ for f in os.listdir(d) if f.endswith(".py") and f[0] != "_")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `ikp` parser; `command`: the subcommand about to run, the only one built when it is known
    (its parsing, help and errors are the same as in the whole parser)."""
    parser = argparse.ArgumentParser(
        prog="ikp",
        description="ikp_cute: region-level timelines inside GPU kernels",
        epilog="start with: ikp decode CAPTURE.npy -o trace.pftrace   (then: ikp stats, ikp report)\n"
               "terms of the output (passed, no record, itself, cv...): ikp glossary, or docs/glossary.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_PrintVersion)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _modules(command):
        example = getattr(module, "EXAMPLE", None)
        p = sub.add_parser(
            module.NAME,
            help=module.HELP,
            description=module.HELP,
            epilog=f"example:\n  {example}" if example else None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        add_quiet(p)  # here, so that no command lacks them
        add_verbose(p, getattr(module, "VERBOSE_HELP", None))
        add_read_limits(p)
        p.set_defaults(_run=module.run)
    return parser


def _message(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.filename}: {e.strerror or e}"  # names the file, not a bare errno line
    return str(e)


def main(argv: list[str] | None = None) -> int:
    try:
        given = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(given[0] if given else None).parse_args(given)
    except KeyboardInterrupt:
        print("ikp: interrupted", file=sys.stderr)
        return 130
    try:
        with terminate_as_interrupt(), warnings.catch_warnings(), \
                read_limits(args.max_decompressed, args.read_timeout):  # a killed command cleans up as after Ctrl-C
            if not args.verbose:  # a library's remarks (matplotlib, numpy) are no news to the user: -v shows them
                warnings.simplefilter("ignore")
            return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(f"ikp {args.command}: interrupted (no output written)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ikp ... | head`: the reader left; nothing to report
        sys.stderr.close()
        return 0
    except (DecodeError, OSError, ValueError, UnicodeDecodeError) as e:
        print(f"ikp {args.command}: error: {_message(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
