"""Masking passwords in URLs: every message that repeats a store's URL goes through here."""

from __future__ import annotations

import re

_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&#]*)", re.IGNORECASE)


def redacted(url: str) -> str:
    """``url`` with its password masked, for every message that repeats a URL.

    ``postgresql://user:secret@host/db`` gives ``postgresql://user:***@host/db``; a
    ``password=`` parameter (in a query string or a libpq ``key=value`` string) is masked too.
    """
    scheme, separator, rest = url.partition("://")
    if separator:
        end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
        credentials, at, host = rest[:end].rpartition("@")
        if at and ":" in credentials:
            user = credentials.split(":", 1)[0]
            url = f"{scheme}://{user}:***@{host}{rest[end:]}"
    return _PASSWORD.sub(r"\1***", url)
