"""Request stores on Redis, Redis Sentinel and Redis Cluster (``ratekeeper[redis]``).

Consistency: exact across processes and machines. Every decision is one run of a Lua script
(``scripts.py``: a single-hit script per algorithm for ``apply``, the batch script for
``apply_many``), which Redis executes atomically on the server that owns the key's slot,
with the time taken from that server's ``TIME`` so that every client agrees on it. On one
server (or Sentinel) the same entries are called as the functions of a Redis 7 library
(``FCALL``), loaded when a call finds it missing; a server without functions is sent the
scripts (``EVALSHA``), and so is a cluster. A batch is
one script run per slot (one round trip on a single server; one per slot, concurrently in
asyncio, in a cluster): atomic within a slot. Every key written carries a TTL.

``all_or_nothing`` on one server, or in one slot of a cluster (keys built with
``tag="identity"`` put every limit of one identity in one slot), is one atomic script run: it
keeps nothing unless every hit is allowed. A cluster batch over several slots (the login
check: one limit per address, one per username) cannot be one script run, so it is applied
in two phases:

1. each slot's part runs atomically, with all_or_nothing inside the slot, and its reply also
   carries the ``now`` its server used; if every part admitted every hit, that is the answer
   (one round trip per slot, the slots concurrently in asyncio);
2. else each part that admitted its hits is sent a refund (the refund script: each
   algorithm's ``refund``, the inverse of the step it took, at that part's ``now``), and every
   decision is reported with ``granted`` 0, as for a refused batch on one server.

So such a batch never admits beyond any of its limits (a hit is counted before it is reported
allowed), and a refused batch has consumed nothing once ``apply_many`` returns (but for its
hits under a limit with debt, which count whatever the others do). It is not isolated:
between the two phases another client can find the refused batch's hits counted and be
refused for them. A refund is the exact inverse of its step when no other hit came in
between (else see ``ratekeeper.algorithms``: the refill-based algorithms may give back up to
that interval's refill more). If a part raises, the parts that admitted are refunded before
``StoreError`` is raised; if a refund itself fails, the decisions still say refused and the
failure is logged (``ratekeeper.store``): those hits then stay counted until their state
frees up.

``release`` frees concurrency slots with its own script; every script refuses a cost that is
not a non-negative integer before it writes anything.

Errors are sorted at this boundary (``failure``): bad credentials, an unknown database, a
missing permission or a cluster URL for a server not in cluster mode raise
``StoreConfigError``; a script's refusal of a caller's value raises
``InvalidInputError``; anything else redis-py raises (a refused connection, a timeout, a server
error) raises ``StoreError``, the only one a failure policy answers.

``RedisStore`` and ``AsyncRedisStore`` are twins: only I/O differs.
"""

from ratekeeper.stores.redis.async_store import AsyncRedisStore
from ratekeeper.stores.redis.batching import MAX_BATCH
from ratekeeper.stores.redis.errors import ERRORS, failure
from ratekeeper.stores.redis.store import RedisStore

__all__ = ["ERRORS", "MAX_BATCH", "AsyncRedisStore", "RedisStore", "failure"]
