"""`ikp` command line. Each subcommand is a module in host_decode/cli/commands/ exposing
NAME, HELP, add_arguments(parser) and run(args) -> exit code; this file only discovers them, so that
commands stay independent (and cheap to import: heavy imports belong inside run())."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from host_decode.cli import commands
from host_decode.core.errors import DecodeError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ikp", description="ikp_cute: region-level timelines inside GPU kernels")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except DecodeError as e:
        print(f"ikp {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"ikp {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
