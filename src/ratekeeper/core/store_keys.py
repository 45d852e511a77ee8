"""Every key ratekeeper writes to a shared store, and every identity the engine counts under,
is built here.

Layout: ``<prefix>:<layout>:{<limit>:<identity>}`` by default (``<layout>`` is
``KEY_LAYOUT``), so all the state of one limit for one identity lives in one Redis Cluster
slot. With ``tag="identity"`` the layout is ``<prefix>:<layout>:{<identity>}:<limit>``: every
limit of one identity then shares a slot, which is what lets a batch over several limits of
one identity stay atomic in a cluster.

``<limit>`` is the limit's id made shorter (``limit_tag``): its algorithm as one letter, and
``,`` for every ``:`` in the rest, so ``gcra:10/60:b3`` is ``g10/60,b3``. It holds no ``:``,
so the first ``:`` in a hash tag ends it, and an identity's own ``:`` need no escaping.

User input cannot break the hash tag or reach another key: ``%``, ``{`` and ``}`` in an
identity are percent-escaped, and an identity longer than ``MAX_IDENTITY`` characters is
replaced by ``#`` and its SHA-256 (a literal leading ``#`` is escaped too).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

from ratekeeper.core.errors import StoreConfigError
from ratekeeper.core.limits import Limit
from ratekeeper.core.moved import renamed
from ratekeeper.core.registry import spec

#: The layout of the keys and of the state under them (the package's version is
#: ``ratekeeper.__version__``). Bumped with every change of either, so that during a rolling
#: deploy no script reads a state written in another layout: "3" names a limit by
#: ``limit_tag`` and leaves ``:`` in identities as it is, where "2" wrote the limit's whole id
#: and escaped ``:``; "2" packed fixed-size states as little-endian doubles, where "1" wrote
#: them as "%.17g" text.
KEY_LAYOUT = "3"
MAX_IDENTITY = 256
_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})


def escape(identity: str) -> str:
    """Return ``identity`` made safe to embed in a key."""
    if len(identity) > MAX_IDENTITY:
        return bounded(identity)
    if "%" in identity or "{" in identity or "}" in identity:  # rare: translate is slower
        identity = identity.translate(_ESCAPES)
    return "%23" + identity[1:] if identity[:1] == "#" else identity


@lru_cache(maxsize=4096)
def limit_tag(limit: Limit) -> str:
    """``limit``'s part of its keys: its id with the algorithm as one letter and ``,`` for
    ``:`` (``gcra:10/60:b3`` is ``g10/60,b3``); distinct limits get distinct tags."""
    algorithm = limit.algorithm.value
    return spec(limit.algorithm).letter + limit.id[len(algorithm) + 1 :].replace(":", ",")


#: Where the hash tag goes: around the limit and identity, or around the identity alone.
TAGS = ("limit", "identity")


def check_tag(tag: str) -> None:
    """Raise ``StoreConfigError`` unless ``tag`` is one of ``TAGS``."""
    if tag not in TAGS:
        raise StoreConfigError(f"tag must be 'limit' or 'identity', not {tag!r}")


def check_prefix(prefix: str) -> None:
    """Raise ``StoreConfigError`` unless ``prefix`` is a non-empty string without ``{`` or
    ``}``, which would move the hash tag and so put every key in one cluster slot."""
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise StoreConfigError(
            f"prefix must be a non-empty string without '{{' or '}}', not {prefix!r}"
        )


def state_key(limit: Limit, identity: str, prefix: str = "rk", tag: str = "limit") -> str:
    """The key holding ``limit``'s state for ``identity``."""
    if tag == "identity":
        return f"{prefix}:{KEY_LAYOUT}:{{{escape(identity)}}}:{limit_tag(limit)}"
    return f"{prefix}:{KEY_LAYOUT}:{{{limit_tag(limit)}:{escape(identity)}}}"


# -- the engine's identities ------------------------------------------------------------------

_ESCAPE_DOMAIN = str.maketrans({"%": "%25", "/": "%2F"})
_ESCAPE_ENTRY_KEY = str.maketrans({"%": "%25", "|": "%7C", ":": "%3A"})
_ESCAPE_ENTRY_VALUE = str.maketrans({"%": "%25", "|": "%7C"})


def identity(domain: str, key: str) -> str:
    """The identity the engine counts ``key`` of ``domain`` under: ``<domain>/<key>``.

    ``%`` and ``/`` in the domain are percent-escaped, so that the first ``/`` always ends it
    and no two ``(domain, key)`` pairs share an identity: ``("a/b", "x:1")`` and
    ``("a", "b/x:1")`` count apart. The empty domain gives ``/<key>``. A longer identity than
    ``MAX_IDENTITY`` characters is ``bounded``: it holds no ``/``, so it is no other's.
    """
    counted_as = f"{domain.translate(_ESCAPE_DOMAIN)}/{key}"
    return counted_as if len(counted_as) <= MAX_IDENTITY else bounded(counted_as)


def bounded(text: str) -> str:
    """``text``, or ``#`` and its SHA-256 when it is longer than ``MAX_IDENTITY`` characters.

    Counters are kept under what a request says (a header, a path, a descriptor's value), and
    a request may say a great deal: a store keeping each such counter holds at most 65
    characters of it, and two texts still count apart."""
    if len(text) <= MAX_IDENTITY:
        return text
    return "#" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def descriptor_key(entries: Sequence[tuple[str, str]]) -> str:
    """The override key of a descriptor: ``key:value`` per entry, joined by ``|``.

    ``[("user", "241531")]`` gives ``user:241531``, the form the source design's per-key
    configuration uses. ``%``, ``|`` (and ``:`` in keys) are percent-escaped, so no two
    descriptors share a key.
    """
    return "|".join(
        f"{key.translate(_ESCAPE_ENTRY_KEY)}:{value.translate(_ESCAPE_ENTRY_VALUE)}"
        for key, value in entries
    )


def descriptor_entries(key: str) -> tuple[tuple[str, str], ...] | None:
    """The entries whose ``descriptor_key`` is ``key``; None when no descriptor has it."""
    entries = []
    for part in key.split("|"):
        name, colon, value = part.partition(":")
        if not colon:
            return None
        entries.append((unquote(name), unquote(value)))
    return tuple(entries)


#: The old names of names here, found with a ``DeprecationWarning`` until 0.3.0.
_RENAMED = {"VERSION": "KEY_LAYOUT"}


def __getattr__(name: str) -> Any:
    """An old name (``VERSION``): its new one's object, with a warning."""
    return renamed(__name__, name, _RENAMED, globals())
