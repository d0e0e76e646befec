"""ikp glossary [TERM...]: what the terms of ikp's output mean (host_decode.reports.glossary; docs/glossary.md)."""

NAME = "glossary"
HELP = "what the terms of ikp's output mean (passed, no record, itself, cv, ...); the same as docs/glossary.md"
EXAMPLE = "ikp glossary passed 'no record'"


def add_arguments(p) -> None:
    from host_decode.cli.common import add_format

    p.add_argument("terms", nargs="*", help="terms to explain (a part of a term matches; default: every term)")
    add_format(p)


def run(args) -> int:
    from host_decode.cli.common import next_step, print_result
    from host_decode.reports.glossary import lookup
    from host_decode.reports.tables.console import Column, Table

    found = lookup(args.terms)
    rows = [{"term": term, "printed by": where, "meaning": meaning} for term, (where, meaning) in found.items()]
    table = Table("terms of ikp's output", [Column("term", "term", text=True),
                                           Column("printed by", "printed by", text=True),
                                           Column("meaning", "meaning", text=True)], rows, name="glossary",
                  keys=1, notes=["the same table: docs/glossary.md"], terms=None)
    print_result(args, [table], rows)
    next_step("`ikp glossary` lists every term; the tables of every command name the terms they use", args)
    return 0
