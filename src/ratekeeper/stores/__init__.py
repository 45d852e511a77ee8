"""Request stores: where the live state of every limit is kept.

A store exposes one atomic read-modify-write primitive, ``apply``, plus ``apply_many``,
``admit`` and ``refund``, ``release``, ``reset`` and ``ping`` (the contract:
``ratekeeper.stores.contract``). Stores are chosen by URL through one registry, ``open_store``
(``ratekeeper.stores.opening``).

The rooms, each importing only those below it: ``opening``; ``wrappers`` (the failure policy,
leased limits, the over-limit cache); the backends ``memory`` and ``redis``, which never import
each other; ``contract`` and ``health``.
"""

from __future__ import annotations

from ratekeeper.stores.contract import Admitted, AsyncStore, Health, Hit, Store
from ratekeeper.stores.memory import AsyncMemoryStore, MemoryStore
from ratekeeper.stores.opening import open_async_store, open_store

__all__ = [
    "Admitted",
    "AsyncMemoryStore",
    "AsyncStore",
    "Health",
    "Hit",
    "MemoryStore",
    "Store",
    "open_async_store",
    "open_store",
]
