"""The in-memory request store: the embedded default (``MemoryStore``, and its asyncio face
``AsyncMemoryStore``).

Consistency: exact. Every ``apply`` runs the algorithm's ``step`` under one lock, so decisions
on a key are serialised across threads, and an asyncio task can never be interrupted inside one
(the store never awaits). The state lives in this process only: several processes need a shared
store such as Redis. A forked child starts with a copy of the state and a fresh lock (a lock
held by another thread at the fork would otherwise stay held in the child for ever). Memory is
bounded: keys free for ``LINGER`` seconds are dropped a few at a time, and at most
``max_keys`` are kept (``tables``).
"""

from ratekeeper.stores.contract import Admitted, Hit
from ratekeeper.stores.memory.store import AsyncMemoryStore, Clock, MemoryStore
from ratekeeper.stores.memory.tables import EXPIRE_PER_INSERT, LINGER

__all__ = [
    "EXPIRE_PER_INSERT",
    "LINGER",
    "Admitted",
    "AsyncMemoryStore",
    "Clock",
    "Hit",
    "MemoryStore",
]
