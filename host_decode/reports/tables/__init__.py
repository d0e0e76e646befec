"""Console tables of the `ikp` commands, one module per command's output; console.py holds the console and
the one table model and renderer they share. A command builds its data (JSON-ready) and a module here turns
it into Tables and lines, so `--format json`, `--format csv` and the table show the same numbers."""
