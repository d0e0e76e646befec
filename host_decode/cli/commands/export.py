"""ikp export CAPTURES... -o TABLES/: the decoded tables (launches, spans, instants, flag events, matches,
flows) as Parquet files for DuckDB, Polars or Spark, streamed capture by capture (host_decode.writers.parquet;
the schema: docs/export.md)."""

NAME = "export"
HELP = "decoded tables of many captures (ranks, launches) as Parquet for DuckDB / Polars / Spark, in bounded memory"
EXAMPLE = "ikp export tests/fixtures/flag_ranks -o tables    # then: duckdb -c \"FROM 'tables/flag_matches.parquet'\""


def add_arguments(p) -> None:
    from host_decode.cli.common import add_force, add_format, add_names, add_progress

    p.add_argument("captures", nargs="+", help="BUFFER.npy files or directories of them (e.g. one capture per rank)")
    p.add_argument("-o", "--output", required=True, metavar="TABLES",
                   help="a new directory: one .parquet file per table, and export.json (row counts, clock bound)")
    p.add_argument("--tables", choices=("parquet",), default="parquet",
                   help="file format of the tables (default parquet: Apache Parquet, zstd)")
    add_format(p)
    add_names(p)
    add_progress(p)
    add_force(p)


def run(args) -> int:
    from host_decode.cli.common import next_step, outputs, print_result, progress
    from host_decode.load.inputs import read_names
    from host_decode.reports.tables.console import Column, Table
    from host_decode.writers.parquet import export_tables, require_pyarrow

    require_pyarrow()  # before any output is made
    with outputs(args, args.captures, args.names) as out:
        folder = out.add_new_dir(args.output)
        manifest = export_tables(args.captures, folder, names=read_names(args.names),
                                 progress=lambda files: progress(files, "export", args))
    rows = [{"table": name, "rows": t["rows"], "file": f"{args.output}/{t['file']}"}
            for name, t in manifest["tables"].items()]
    print_result(args, [
        f"wrote {args.output}: {manifest['captures']} capture(s) of {manifest['ranks']} rank(s); clocks agree "
        f"within {manifest['clock_error_bound_ns']} ns",
        Table("tables (schema: docs/export.md)", [Column("table", "table", text=True), Column("rows", "rows"),
                                                  Column("file", "file", text=True)], rows, name="tables", keys=1),
    ], manifest)
    next_step(f"`duckdb -c \"SELECT * FROM '{args.output}/flag_matches.parquet' LIMIT 10\"` (the tables' columns: "
              "docs/export.md)", args)
    return 0
