"""Every key ratekeeper writes to a shared store is built here.

Layout: ``<prefix>:<version>:{<limit id>:<identity>}`` by default, so all the state of one
limit for one identity lives in one Redis Cluster slot. With ``tag="identity"`` the layout is
``<prefix>:<version>:{<identity>}:<limit id>``: every limit of one identity then shares a slot,
which is what lets a batch over several limits of one identity stay atomic in a cluster.

User input cannot break the hash tag or reach another key: ``%``, ``{``, ``}`` and ``:`` in an
identity are percent-escaped, and an identity longer than ``MAX_IDENTITY`` characters is
replaced by ``#`` and its SHA-256 (a literal leading ``#`` is escaped too).
"""

from __future__ import annotations

import hashlib

from ratekeeper.limit import Limit

VERSION = "1"
MAX_IDENTITY = 256
_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D", ":": "%3A"})


def escape(identity: str) -> str:
    """Return ``identity`` made safe to embed in a key."""
    if len(identity) > MAX_IDENTITY:
        return "#" + hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
    safe = identity.translate(_ESCAPES)
    return "%23" + safe[1:] if safe.startswith("#") else safe


#: Where the hash tag goes: around the limit and identity, or around the identity alone.
TAGS = ("limit", "identity")


def check_tag(tag: str) -> None:
    """Raise ``ValueError`` unless ``tag`` is one of ``TAGS``."""
    if tag not in TAGS:
        raise ValueError(f"tag must be 'limit' or 'identity', not {tag!r}")


def state_key(limit: Limit, identity: str, prefix: str = "rk", tag: str = "limit") -> str:
    """The key holding ``limit``'s state for ``identity``."""
    if tag == "identity":
        return f"{prefix}:{VERSION}:{{{escape(identity)}}}:{limit.id}"
    return f"{prefix}:{VERSION}:{{{limit.id}:{escape(identity)}}}"
