"""Subcommands of `ikp`, one module each (see host_decode/cli/__init__.py)."""
