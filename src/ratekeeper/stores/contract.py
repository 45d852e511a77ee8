"""The request-store contract: what every store does (``Store``, ``AsyncStore``), what a store
that several processes share does besides (``LeasingStore``, ``AsyncLeasingStore``), what a
store made of shards says of itself (``Sharded``), and the values they take and give.

The backends (``ratekeeper.stores.memory``, ``ratekeeper.stores.redis``) and the wrappers
stacked on them (``ratekeeper.stores.wrappers``) import this module for the contract's types,
never each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, Required, TypedDict, TypeGuard, Unpack

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.leases import Taken
from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import InvalidInputError, InvalidLimitError
from ratekeeper.core.inputs import MAX_COST, check_hit, check_now
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import spec
from ratekeeper.stores.health import Health

__all__ = [
    "MAX_HOLDER",
    "MAX_LEASE_TTL",
    "Admitted",
    "AsyncLeasingStore",
    "AsyncStore",
    "Health",
    "Hit",
    "Lease",
    "LeaseTerms",
    "LeasingStore",
    "Sharded",
    "Store",
    "Taken",
    "check_lease",
    "check_release",
    "is_sharded",
]

#: One hit in a batch: ``(key, limit, cost)``.
Hit = tuple[str, Limit, int]


class Admitted(NamedTuple):
    """A hit's decision, and ``at``, the time the store took it at (seconds on the store's
    clock: the server's for Redis, the slice's clock for a leased limit), which a ``refund``
    of what it granted is given."""

    decision: Decision
    at: float


class Store(Protocol):
    """The request-store contract.

    ``apply(key, limit, cost=1, now=None)`` atomically runs ``limit``'s algorithm on ``key``'s
    state and returns the ``Decision``; ``now`` (seconds since the epoch) defaults to the store's
    clock. ``apply_many(hits, all_or_nothing=False, now=None)`` applies ``(key, limit, cost)``
    triples atomically as one batch; with ``all_or_nothing`` nothing is consumed unless every
    hit is allowed, but for the hits under a limit with debt, which count whatever the others
    do. ``release(key, limit, slots=1, now=None)`` gives back up to ``slots`` slots of a
    concurrency limit, the earliest-expiring first (its decision's ``granted`` is the number
    released). ``admit(hits, all_or_nothing=False)`` is ``apply_many`` on the store's own
    clock (the server's, for Redis) that also says when: each decision as an ``Admitted``,
    with ``at``, the time the store took it. ``refund(key, limit, cost, at)`` gives back
    ``cost`` units a hit was granted at ``at`` (an ``Admitted``'s), by the algorithm's pure
    ``refund``: never more than the hit took, never a count below nothing nor a bucket above
    its capacity, and nothing once the window that counted them has turned; give it only a
    granted hit's ``granted`` (a refused hit took nothing). ``reset(key, limit)`` forgets the
    key's state. ``ping()`` says whether the store answers now, as a ``Health``. ``close()``
    releases connections.

    A store that several processes share also has ``lease`` (``LeasingStore``).

    Keys and costs are checked before anything is counted (``ratekeeper.core.inputs``): a bad one
    raises ``InvalidInputError``. A store that fails raises ``StoreError``; one that is
    misconfigured raises ``StoreConfigError``, also when opened through a failure policy.
    """

    def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision: ...

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]: ...

    def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]: ...

    def refund(self, key: str, limit: Limit, cost: int, at: float) -> None: ...

    def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision: ...

    def reset(self, key: str, limit: Limit) -> None: ...

    def ping(self) -> Health: ...

    def close(self) -> None: ...


class AsyncStore(Protocol):
    """The asyncio twin of ``Store``: the same methods, awaitable."""

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision: ...

    async def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]: ...

    async def admit(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False
    ) -> list[Admitted]: ...

    async def refund(self, key: str, limit: Limit, cost: int, at: float) -> None: ...

    async def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision: ...

    async def reset(self, key: str, limit: Limit) -> None: ...

    async def ping(self) -> Health: ...

    async def close(self) -> None: ...


class LeaseTerms(TypedDict, total=False):
    """The terms of an exchange of a slice (``LeasingStore.lease``), but for its key, limit and
    the units wanted: ``holder`` and ``ttl`` always; ``returned``, ``taken_at``, ``need`` and
    ``now`` as their defaults in ``Lease`` say otherwise."""

    holder: Required[str]
    ttl: Required[float]
    returned: int
    taken_at: float | None
    need: int
    now: float | None


class Lease(NamedTuple):
    """One exchange of a slice, every term given or its default (``check_lease`` makes it):
    ``returned`` units of the slice ``holder`` took of ``key``'s budget under the leased
    ``limit`` at ``taken_at`` given back, and a new slice of up to ``want`` units taken, that
    ``holder`` may grant from for ``ttl`` seconds, never less than ``need``; ``now`` is the
    store's clock when None."""

    key: str
    limit: Limit
    want: int
    holder: str
    ttl: float
    returned: int = 0
    taken_at: float | None = None
    need: int = 1
    now: float | None = None


class LeasingStore(Store, Protocol):
    """A store that several processes share: a ``Store`` that also exchanges slices of a leased
    limit's budget, which the wrapper answering leased limits from slices calls
    (``ratekeeper.stores.wrappers.leasing``).

    ``lease(key, limit, want, *, holder, ttl, returned=0, taken_at=None, need=1, now=None)``
    gives back ``returned`` units of the slice ``holder`` took of ``key``'s budget under the
    leased ``limit`` at ``taken_at`` (the ``now`` its ``Taken`` reported), and takes a new slice
    of up to ``want`` units that ``holder`` may grant from for ``ttl`` seconds, in one atomic
    step (``ratekeeper.algorithms.leases.exchange``): never less than ``need`` (the asking
    hit's cost; none when fewer are left). ``want`` 0 only gives back. ``InvalidLimitError``
    for a limit that cannot lease, ``InvalidInputError`` for a bad key, count, holder or
    lifetime (``check_lease``).
    """

    def lease(self, key: str, limit: Limit, want: int, **terms: Unpack[LeaseTerms]) -> Taken: ...


class AsyncLeasingStore(AsyncStore, Protocol):
    """The asyncio twin of ``LeasingStore``."""

    async def lease(
        self, key: str, limit: Limit, want: int, **terms: Unpack[LeaseTerms]
    ) -> Taken: ...


class Sharded(Protocol):
    """A store made of shards, each with its own failures (a Redis Cluster: one shard per
    master): ``sharded`` is True, and ``shard_of(key, limit)`` names the shard that holds
    ``key``'s state under ``limit`` now (``""`` when none does)."""

    sharded: bool

    def shard_of(self, key: str, limit: Limit) -> str: ...


def is_sharded(store: object) -> TypeGuard[Sharded]:
    """Whether ``store`` is made of shards: its ``sharded`` is True (a wrapper says what the
    store it wraps says)."""
    return getattr(store, "sharded", False) is True


def check_release(limit: Limit, slots: Any) -> int:
    """``slots`` if it can be released from ``limit``: ``InvalidLimitError`` unless ``limit`` is a
    concurrency limit, ``InvalidInputError`` unless ``slots`` is an integer from 1 to
    ``MAX_COST``."""
    if limit.algorithm is not Algorithm.CONCURRENCY:
        raise InvalidLimitError(f"release needs a concurrency limit, not {limit.algorithm.value}")
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_COST:
        raise InvalidInputError(f"slots must be a positive integer, not {slots!r}")
    return int(slots)


#: The longest lifetime of a slice, in seconds: a day.
MAX_LEASE_TTL = 86_400.0
#: The longest name of a slice's holder.
MAX_HOLDER = 200


def check_lease(key: Any, limit: Limit, want: Any, terms: LeaseTerms) -> Lease:
    """The exchange of ``want`` units of ``key``'s budget under ``limit`` on ``terms``, if it can
    be made: ``TypeError`` for a term missing or unknown, ``InvalidLimitError`` unless
    ``limit`` can lease, ``InvalidInputError`` unless the key is valid, ``want`` and
    ``returned`` integers from 0 to ``MAX_COST``, ``need`` from 1 to ``want``, ``holder`` a
    non-empty string of at most ``MAX_HOLDER`` characters, ``ttl`` finite seconds above 0 and
    at most ``MAX_LEASE_TTL`` and ``taken_at`` a time (``now`` is the store's to check)."""
    ask = Lease(key, limit, want, **terms)
    why = spec(limit.algorithm).no_lease
    if why:
        raise InvalidLimitError(f"{limit.algorithm.value} does not lease: {why}")
    if limit.partial or limit.debt:
        raise InvalidLimitError("a partial limit or one with debt does not lease")
    key, want = check_hit(key, want)
    returned = check_hit(key, ask.returned)[1]
    need = check_hit(key, ask.need)[1]
    if not 1 <= need <= max(want, 1):
        raise InvalidInputError(f"need must be from 1 to the units wanted ({want}), not {need!r}")
    holder, ttl = ask.holder, ask.ttl
    if not isinstance(holder, str) or not 0 < len(holder) <= MAX_HOLDER:
        raise InvalidInputError(
            f"a lease holder is a string of 1 to {MAX_HOLDER} characters, not {holder!r}"
        )
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not 0 < ttl <= MAX_LEASE_TTL  # NaN fails too
    ):
        raise InvalidInputError(
            f"a lease lifetime is seconds above 0 and at most {MAX_LEASE_TTL:g}, not {ttl!r}"
        )
    taken_at = None if ask.taken_at is None else check_now(ask.taken_at)
    return ask._replace(key=key, want=want, returned=returned, taken_at=taken_at)
