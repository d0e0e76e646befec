"""mkdocs hook: the `ikp` command reference, generated from the argparse parsers at build time.

A page that holds the line ``<!-- ikp:cli-reference -->`` gets, in its place, one section per command
in the order ``ikp --help`` lists them: its help line, usage, example and a table of its arguments, all
read from ``host_decode.cli.build_parser()`` (each command module's NAME, HELP, EXAMPLE and
add_arguments). A command added, renamed or given a new flag shows up at the next build; nothing here
names a command. tests/docs/test_docs.py::test_cli_reference_lists_every_command guards it.
"""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- ikp:cli-reference -->"
WIDTH = "100"  # usage lines are wrapped as in a 100-column terminal, whatever the build machine's


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """{name: parser} of the subcommands, in the order `ikp --help` lists them."""
    for action in parser._actions:  # argparse has no public accessor for its subparsers
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise ValueError("the ikp parser has no subcommands")


def render() -> str:
    from host_decode.cli import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        commands = subcommands(parser)
        out = ["Commands, in the order `ikp --help` lists them (the workflow order):", ""]
        out += [f"- [`ikp {name}`](#ikp-{name}): {sub.description}" for name, sub in commands.items()]
        out += ["", "Every command takes `-h/--help`, and `-q/--quiet` drops its `next:` hint.", ""]
        for name, sub in commands.items():
            out += command_section(name, sub)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(out) + "\n"


def command_section(name: str, sub: argparse.ArgumentParser) -> list[str]:
    out = [f"## ikp {name} {{#ikp-{name}}}", "", escape(sub.description or ""), ""]
    out += ["```text", sub.format_usage().strip(), "```", ""]
    if sub.epilog:
        example = sub.epilog.split("\n", 1)[-1].strip()
        out += ["Example:", "", "```text", example, "```", ""]
    rows = [argument_row(a) for a in sub._actions if not isinstance(a, argparse._HelpAction)]
    if rows:
        out += ["| argument | meaning | default |", "| --- | --- | --- |", *rows, ""]
    return out


def argument_row(action: argparse.Action) -> str:
    if action.option_strings:
        shown = ", ".join(action.option_strings)
        if action.nargs != 0:
            shown += " " + (action.metavar or action.dest.upper())
    else:
        shown = action.metavar or action.dest
        if action.nargs in ("*", "+"):
            shown += " ..."
    meaning = escape(action.help or "")
    if action.choices is not None and not isinstance(action.choices, dict):
        meaning += " (one of: " + ", ".join(f"`{c}`" for c in action.choices) + ")"
    default = action.default
    shown_default = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
    return f"| `{shown}` | {meaning} | {shown_default} |"


def escape(text: str) -> str:
    """Help text as one markdown table cell: pipes escaped, angle brackets shown as written."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
