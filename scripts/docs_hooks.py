"""MkDocs hooks for the documentation's site (mkdocs.yml's ``hooks``).

The docstrings end a sentence that introduces an example with ``::`` (``Example::``), as
reStructuredText does; on the API pages, where they are rendered as Markdown, that is one
colon.
"""

from __future__ import annotations

import re
from typing import Any

_INTRODUCES_CODE = re.compile(r"::</p>")


def on_page_content(html: str, page: Any, **_: Any) -> str:
    """The page's HTML, with the API pages' ``Example::`` read as ``Example:``."""
    if page.file.src_uri.startswith("api/"):
        return _INTRODUCES_CODE.sub(":</p>", html)
    return html
