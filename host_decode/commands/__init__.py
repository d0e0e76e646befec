"""Subcommands of `ikp`, one module each (see host_decode/cli.py)."""
