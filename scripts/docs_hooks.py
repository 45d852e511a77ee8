"""The documentation site's hooks (mkdocs.yml): its API pages render the docstrings, written
as reStructuredText-like prose, as Markdown.

Two things read differently there. A sentence that introduces an example ends with ``::``
(``Example::``): on the page, one colon (``on_page_content``). A definition list, a term on a
line of its own and its definition indented below it (``Decision``'s fields), would run into
one paragraph: ``DefinitionLists``, a griffe extension, writes it as Markdown's (the
``def_list`` extension).
"""

from __future__ import annotations

from typing import Any

import griffe


def on_page_content(html: str, page: Any, **_: Any) -> str:
    """The page's HTML, with the API pages' ``Example::`` read as ``Example:``."""
    if page.file.src_uri.startswith("api/"):
        return html.replace("::</p>", ":</p>")
    return html


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def definition_lists(text: str) -> str:
    """``text`` with each term followed at once by its definition indented four spaces or
    more (no blank line between them, which an example's code would have) written as a
    Markdown definition: the term, then ``:   `` and the definition."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        following = lines[i + 1] if i + 1 < len(lines) else ""
        margin = _indent(line)
        is_term = (
            line.strip()
            and following.strip()
            and _indent(following) >= margin + 4
            and not line.rstrip().endswith(":")
        )
        if not is_term:
            out.append(line)
            i += 1
            continue
        if out and out[-1].strip():
            out.append("")  # a term starts a paragraph of its own
        out.append(line)
        body = _indent(following)
        i += 1
        marker = ":   "
        while i < len(lines) and lines[i].strip() and _indent(lines[i]) >= body:
            out.append(" " * margin + marker + lines[i][body:])
            marker = "    "
            i += 1
    return "\n".join(out)


class DefinitionLists(griffe.Extension):
    """Each docstring's definition lists as Markdown's."""

    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = definition_lists(obj.docstring.value)
