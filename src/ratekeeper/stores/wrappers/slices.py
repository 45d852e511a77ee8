"""The slices of leased limits a process holds, their sizing and bookkeeping (no I/O): what
``leasing.Leasing`` and its twin ``async_leasing.AsyncLeasing`` share."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Sequence
from math import ceil
from typing import Any, Generic, TypedDict, TypeVar, cast

from ratekeeper.algorithms.leases import Taken
from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import StoreConfigError
from ratekeeper.core.forks import renew_after_fork
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import spec
from ratekeeper.stores.contract import (
    Admitted,
    AsyncLeasingStore,
    Hit,
    LeasingStore,
    Sharded,
    is_sharded,
)

#: Seconds a process may grant from a slice (the store's record of it lasts as long).
TTL = 1.0
#: Seconds of the process's own demand for a key a slice is sized for.
HORIZON = 0.05
#: The largest slice, as a share of the limit's capacity.
SHARE = 0.1
#: Slices kept per process; the least recently used is given back past it.
MAX_SLICES = 100_000
#: The part of a slice's lifetime it is granted from: the rest absorbs clock drift.
USABLE = 0.999

_new = tuple.__new__


class Options(TypedDict, total=False):
    """What a wrapper of slices takes besides its store (``Slices``)."""

    ttl: float
    horizon: float
    share: float
    clock: Callable[[], float]
    background: bool


#: The store under a wrapper of slices: a ``LeasingStore``, or the asyncio twin's.
S = TypeVar("S", LeasingStore, AsyncLeasingStore)


def leased(limit: Limit) -> bool:
    """Whether ``limit``'s hits are granted from slices."""
    return limit.sync == "leased"


def check_options(ttl: Any, horizon: Any, share: Any) -> tuple[float, float, float]:
    """The lease options if they are sound, else ``StoreConfigError`` saying why."""
    for name, value, top in (("lease_ttl", ttl, 86_400.0), ("lease_horizon", horizon, 60.0)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= top:
            raise StoreConfigError(
                f"{name} must be seconds above 0 and at most {top:g}, not {value!r}"
            )
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise StoreConfigError(f"lease_share must be above 0 and at most 1, not {share!r}")
    if horizon > ttl:
        raise StoreConfigError(
            f"lease_horizon ({horizon:g}s) must be at most lease_ttl ({ttl:g}s): a slice is sized "
            "for what it can grant before it ends"
        )
    return float(ttl), float(horizon), float(share)


class Slice:
    """This process's slice of one key's budget under one leased limit."""

    __slots__ = (
        "asked",
        "began",
        "generation",
        "key",
        "left",
        "limit",
        "limit_value",
        "lock",
        "offset",
        "pending",
        "rate",
        "refused_until",
        "remaining",
        "reset_at",
        "since",
        "taken_at",
        "until",
    )

    def __init__(self, key: str, limit: Limit, now: float) -> None:
        self.key = key
        self.limit = limit
        self.left = 0  # units this process may still grant from it
        self.until = 0.0  # when it ends, on this process's monotonic clock
        self.taken_at: float | None = None  # the store's time of its exchange
        self.began = 0.0  # when its exchange came back, on this process's monotonic clock
        self.offset = 0.0  # the store's clock less this process's monotonic one, about
        self.generation = 0  # exchanges so far
        self.limit_value = limit.capacity  # the store's reported limit, remaining and reset
        self.remaining = 0
        self.reset_at = 0.0
        self.refused_until = 0.0  # the store refused: answer locally until then
        self.asked = 0  # units asked for since the last exchange
        self.since = now  # when the last exchange was
        self.rate = 0.0  # units asked for per second, smoothed over exchanges
        self.lock: Any = None  # serialises the exchanges of one slice
        self.pending: Any = None

    def grant(self, cost: int, now: float) -> Decision:
        """Take ``cost`` from what is left (the caller checked that it holds it)."""
        self.left -= cost
        reset = self.reset_at - now
        return _new(
            Decision,
            (
                True,
                self.limit_value,
                self.left + self.remaining,
                reset if reset > 0.0 else 0.0,
                0.0,
                0.0,
                cost,
                False,
            ),
        )

    def refuse(self, now: float) -> Decision:
        """The store's refusal, answered locally until ``refused_until``."""
        reset = self.reset_at - now
        return _new(
            Decision,
            (
                False,
                self.limit_value,
                self.left + self.remaining,
                reset if reset > 0.0 else 0.0,
                self.refused_until - now,
                0.0,
                0,
                False,
            ),
        )


class Slices(Generic[S]):
    """What the twins share: the slices, their sizing and their bookkeeping (no I/O)."""

    def __init__(
        self,
        store: S,
        *,
        ttl: float = TTL,
        horizon: float = HORIZON,
        share: float = SHARE,
        clock: Callable[[], float] = time.monotonic,
        background: bool = True,
    ) -> None:
        self.store: S = store
        self.ttl, self.horizon, self.share = check_options(ttl, horizon, share)
        self.clock = clock
        if not isinstance(background, bool):
            raise StoreConfigError(f"background is True or False, not {background!r}")
        self.background = background  # sweep every ttl on our own (a thread, or a task)
        self.sharded: bool = is_sharded(store)
        self.slices: dict[tuple[str, str], Slice] = {}
        self.holder = holder_name()
        self.exchanges = 0  # exchanges that took a slice (its hit's, or in vain)
        self.returns = 0  # exchanges that only gave back (sweep, close, eviction)
        self.granted = 0  # units granted from slices, without the store
        renew_after_fork(self)

    def _after_fork(self) -> None:
        # The parent's slices are the parent's: a child that granted from them would grant
        # them twice.
        self.slices = {}
        self.holder = holder_name()

    def _want(self, piece: Slice, cost: int, now: float) -> int:
        """The slice to ask for: the hit's cost at first, then ``horizon`` seconds at the rate
        asked since the last exchange, smoothed, but no more than that rate grants before the
        slice's window ends (what is left at the edge is lost, and counted in the window); at
        least ``cost``, at most ``share`` of the capacity."""
        if piece.taken_at is None:  # no demand seen yet: a key's first slice is its hit's
            piece.asked = 0
            piece.since = now
            return cost
        elapsed = now - piece.since
        rate = piece.asked / (elapsed if elapsed > 0.001 else 0.001)
        piece.rate = rate if piece.rate == 0.0 else (piece.rate + rate) / 2
        piece.asked = 0
        piece.since = now
        want = ceil(piece.rate * self.horizon)
        edge = spec(piece.limit.algorithm).edge
        if edge is not None and piece.taken_at is not None:
            store_now = now + piece.offset
            until_edge = ceil(piece.rate * (edge(store_now, piece.limit) - store_now))
            if until_edge < want:
                want = until_edge
        top = int(piece.limit.capacity * self.share)
        if want > top:
            want = top
        return want if want > cost else cost

    def _took(self, piece: Slice, taken: Taken, sent: float, want: int, cost: int) -> Decision:
        """Keep what an exchange sent at ``sent`` for ``want`` units took, and decide the hit
        of ``cost``. A slice smaller than asked says the budget runs low: once it is granted,
        the next exchange waits until ``horizon`` after this one, for the budget to refill
        (an exchange sooner would find less), unless the budget is ``frozen`` until the
        slice's edge (what is left then is all there is: the process asks for half of it at
        once)."""
        decision = taken.decision
        now = self.clock()
        piece.generation += 1
        piece.began = now
        piece.taken_at = taken.now
        piece.offset = taken.now - sent
        piece.left = taken.granted
        piece.limit_value = decision.limit
        piece.remaining = decision.remaining
        piece.reset_at = now + decision.reset_after
        life = self.ttl
        edge = spec(piece.limit.algorithm).edge
        if edge is not None:
            life = min(life, edge(taken.now, piece.limit) - taken.now)
        piece.until = sent + life * USABLE
        self.exchanges += 1
        if taken.granted < want and not spec(piece.limit.algorithm).frozen:
            piece.refused_until = sent + self.horizon
        # The hit that asked is granted as the store counted it, however late the reply comes:
        # an exact hit's answer comes as late.
        if taken.granted >= cost:
            self.granted += cost
            return piece.grant(cost, now)
        wait = decision.retry_after if not taken.granted else 0.0
        piece.refused_until = now + min(max(wait, self.horizon), self.ttl)
        return piece.refuse(now)

    def _undo(self, results: list[Any], granted: list[tuple[int, Slice, int]]) -> None:
        """An all_or_nothing batch refused: give the units its slices granted back to them
        (where the slice has not been exchanged since), and report them granted 0."""
        for index, piece, generation in granted:
            if piece.generation == generation:  # the units are still this slice's
                piece.left += results[index].granted
                self.granted -= results[index].granted
            results[index] = results[index]._replace(granted=0)

    def _put_back(self, key: str, limit: Limit, cost: int, at: float) -> None:
        """Refund ``cost`` units granted at ``at`` (this wrapper's clock, read once the hit was
        granted) into the slice of ``key``: only when that slice was taken before ``at`` (the
        units are its own, not an earlier slice's, which the store has settled already: put
        into a later slice they would be given twice, or given to a window that did not count
        them) and has not ended."""
        piece = self.slices.get((limit.id, key))
        if piece is None or piece.taken_at is None or at < piece.began:
            return
        if self.clock() >= piece.until:
            return
        piece.left += cost
        self.granted -= cost

    def _worth_giving_back(self, piece: Slice, returned: int, ended: bool) -> bool:
        """Whether a give-back of ``returned`` units of ``piece`` is worth a round trip: it
        returns units, or (a slice not known to have ended, whose units were all granted) it
        drops a record that would hold the bucket back until it expires."""
        if piece.taken_at is None:
            return False
        if returned:
            return True
        held = spec(piece.limit.algorithm).hold is not None
        return held and not ended and self.clock() < piece.until

    def _returns(self, now: float) -> list[Slice]:
        """The slices to give back now: ended with units left, or idle for ``10 * ttl``
        (dropped, with what they hold)."""
        due = []
        idle = now - 10 * self.ttl
        for slot, piece in list(self.slices.items()):
            if piece.pending is not None or (piece.lock is not None and piece.lock.locked()):
                continue
            if piece.left and now >= piece.until:
                due.append(piece)
            elif piece.since < idle and not piece.left:
                del self.slices[slot]
        return due

    def _evicted(self) -> Slice | None:
        """The least recently made slice, taken out when there are too many."""
        if len(self.slices) <= MAX_SLICES:
            return None
        slot = next(iter(self.slices))
        return self.slices.pop(slot)

    def shard_of(self, key: str, limit: Limit) -> str:
        """The store's ``shard_of``, asked only of a store that is ``sharded``."""
        return cast(Sharded, self.store).shard_of(key, limit)

    def __getattr__(self, name: str) -> Any:
        if name == "store":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.store, name)


def holder_name() -> str:
    """A name for this process (its slices, its entry on the fleet's roll): its host, pid and
    a random part (pids repeat)."""
    return f"{os.uname().nodename[:60]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def looked(hits: list[Hit]) -> tuple[list[Hit], list[Hit]]:
    """What a batch whose slices refused still sends to the store: its hits under a limit with
    debt, to be counted, and the others as looks (cost 0)."""
    debts = [hit for hit in hits if hit[1].debt]
    return debts, [(key, limit, 0) for key, limit, _ in hits if not limit.debt]


def merged(hits: list[Hit], counted: list[Decision], seen: list[Decision]) -> list[Decision]:
    """The decisions of ``hits`` from the store's answers to ``looked``: a look reported
    allowed only when the hit's cost fits, and granted nothing."""
    debts, looks = iter(counted), iter(seen)
    return [next(debts) if limit.debt else fits(next(looks), cost) for _, limit, cost in hits]


def fits(look: Decision, cost: int) -> Decision:
    """A look's decision as that of a hit of ``cost`` that was not counted."""
    if look.allowed and look.remaining < cost:
        return look._replace(allowed=False)
    return look


def stamped(
    hits: Sequence[Hit], decisions: list[Decision], stamps: list[float], t: float
) -> list[Admitted]:
    """``decisions`` with their times: a hit granted from a slice at ``t`` (this wrapper's
    clock, read once they were granted), any other at the time the store gave it (``stamps``,
    in order; none when the store only looked)."""
    times = iter(stamps)
    return [
        Admitted(one, t if limit.sync == "leased" and cost else next(times, t))
        for one, (_, limit, cost) in zip(decisions, hits, strict=True)
    ]
