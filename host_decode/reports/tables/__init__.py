"""Console tables (rich) of the `ikp` commands, one module per command's output; console.py holds the
console and the one table helper they share. A command module builds its data (JSON-ready) and hands
it to its renderer here, so `--format json` and the table show the same numbers."""
