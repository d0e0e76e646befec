"""griffe extension (mkdocs.yml, mkdocstrings' python handler): the project's docstrings are plain text,
laid out in aligned columns (a field name, then its meaning indented under it) and ``double
backquotes``. Rendered as markdown those columns would run together, so a paragraph whose lines are
aligned (a continuation line indented deeper than its first line, or a run of spaces inside a line) is
shown as written, in a text block; other paragraphs stay markdown, and ``x`` becomes `x`.
tests/docs/test_docs.py::test_docstring_layout_is_kept guards it.
"""

from __future__ import annotations

import re

import griffe

ALIGNED = re.compile(r"\S {3,}\S")


def layout(text: str) -> str:
    out = []
    for paragraph in re.split(r"\n\s*\n", text.strip("\n")):
        lines = paragraph.split("\n")
        indent = len(lines[0]) - len(lines[0].lstrip())
        if indent >= 4:  # already a markdown code block (an indented example after "::")
            out.append(paragraph)
            continue
        deeper = any(len(ln) - len(ln.lstrip()) > indent for ln in lines[1:] if ln.strip())
        if deeper or any(ALIGNED.search(ln) for ln in lines):
            out.append("```text\n" + paragraph + "\n```")
        else:
            out.append(re.sub(r"``([^`]+)``", r"`\1`", paragraph).replace("::\n", ":\n"))
    return "\n\n".join(out)


class PlainTextDocstrings(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = layout(obj.docstring.value)
