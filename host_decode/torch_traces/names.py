"""Kernel names for tables: demangling (c++filt) and shortening C++ signatures to a readable name,
with template arguments restored where two kernels would otherwise shorten alike."""

from __future__ import annotations

import shutil
import subprocess


def demangle(names: list) -> list:
    """Itanium-mangled names (`_Z...`) through c++filt in one batch; others unchanged (torch traces
    usually hold CUPTI's demangled names already). Without c++filt, mangled names stay as they are."""
    mangled = [i for i, n in enumerate(names) if n.startswith("_Z") and "\n" not in n]
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return list(names)
    try:
        out = subprocess.run([tool], input="\n".join(names[i] for i in mangled) + "\n", capture_output=True,
                             text=True, timeout=30, check=True).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return list(names)
    result = list(names)
    for i, text in zip(mangled, out):
        result[i] = text or names[i]
    return result


def shorten(name: str) -> str:
    """`void ns::kernel<T, 4>(float*, int)` -> `kernel`: drops the return type, template arguments,
    parameter list and namespaces (keeping `{lambda...}` / `(anonymous namespace)` out of the way)."""
    text = name.strip()
    if ("::" not in text and "<" not in text and not text.endswith(")")) or text.startswith(("Memcpy", "Memset")):
        return text  # not a C++ signature (triton_poi_fused_add_0, Memcpy HtoD (...)): nothing to strip
    text = _strip_params(text)
    flat = _strip_templates(text)
    parts = _split_top(flat, "::")
    last = parts[-1].strip() if parts else flat
    tokens = _split_top(last, " ")
    base = tokens[-1].strip() if tokens else last.strip()
    return base if base and base.isprintable() else name


def _strip_params(text: str) -> str:
    """Remove a trailing `(...)` parameter list (balanced), if the name has one."""
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch in ")>]}":
            depth += 1
        elif ch in "(<[{":
            depth -= 1
            if depth == 0:
                return text[:i].rstrip() if i > 0 else text
    return text


def _strip_templates(text: str) -> str:
    out, depth = [], 0
    for i, ch in enumerate(text):
        if ch == "<" and not text.startswith("operator", max(0, i - 8)):
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _split_top(text: str, sep: str) -> list:
    """Split on `sep` outside (), [] and {} (so `(anonymous namespace)` stays whole)."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if depth == 0 and text.startswith(sep, i):
            parts.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def short_names(full: list, kinds: list | None = None) -> list:
    """Shortened display names; memcpy/memset rows keep theirs. Distinct full names that shorten to the
    same text get the template-argument hint back (`kernel<...FillFunctor...>`) or a `#k` suffix."""
    unique = list(dict.fromkeys(full))  # repeated full names (pair tables) share one short name
    if len(unique) < len(full):
        kind_of = dict(zip(full, kinds)) if kinds is not None else None
        mapping = dict(zip(unique, short_names(unique, [kind_of[n] for n in unique] if kind_of else None)))
        return [mapping[n] for n in full]
    demangled = demangle(list(full))
    short = [d if kinds is not None and kinds[i] in ("memcpy", "memset") else shorten(d)
             for i, d in enumerate(demangled)]
    seen: dict = {}
    for i, s in enumerate(short):
        seen.setdefault(s, []).append(i)
    for s, idx in seen.items():
        distinct = {demangled[i] for i in idx}
        if len(distinct) < 2:
            continue
        for k, i in enumerate(idx):
            hint = _template_hint(demangled[i])
            short[i] = f"{s}<{hint}>" if hint else f"{s} #{k + 1}"
        if len({short[i] for i in idx}) < len(idx):
            for k, i in enumerate(idx):
                short[i] = f"{short[i]} #{k + 1}"
    return short


def _template_hint(name: str, limit: int = 48) -> str:
    """Short identifiers of the kernel's template arguments, e.g. `4, FillFunctor, Array`."""
    text = _strip_params(name)
    open_at = text.find("<")
    if open_at < 0:
        return ""
    inner = text[open_at + 1: text.rfind(">")] if ">" in text else text[open_at + 1:]
    args = []
    for arg in _split_top(_strip_templates(inner), ","):
        args.append(_split_top(arg.strip(), "::")[-1].strip() if arg.strip() else "")
    hint = ", ".join(a for a in args if a)
    return hint if len(hint) <= limit else hint[: limit - 1] + "…"
