"""Leased quotas, the process's side: ``Leasing`` answers the hits of leased limits
(``Limit(sync="leased")``) from slices of their budget, taken from the shared store.

A hit under a leased limit is granted from this process's slice of the key's budget while the
slice holds its cost and has not ended; only then does the process go to the store, in one
atomic exchange that gives back what is left of the old slice and takes a new one
(``ratekeeper.algorithms.leases``). Every unit granted was taken from the store's budget first,
so the limit holds across every process together; a slice ends before the store stops
counting it (with its window, for the algorithms that count per window; ``ttl`` seconds after
it was taken, for those that refill), so no unit is granted outside the span it was counted
for. Hits under exact limits, looks (cost 0) and hits given an explicit ``now`` go to the store
as they are.

**How big a slice is.** The process asks for what it would use in the next ``horizon``
seconds at the rate it has been asked for the key since its last slice (at least the hit's
cost), and never more than ``share`` of the limit's capacity. The store gives that while the
budget holds twice as much, and half of what is left below that, so a budget running low is
spread among the processes asking.

**What it costs.** Budget taken into a slice and not yet granted is held idle: at most
``share * capacity`` units per process and key, and in steady use about ``horizon`` seconds of
the key's traffic across all processes. What a process has not granted when its slice ends is
given back at its next exchange, by ``sweep`` (every ``ttl`` seconds, in the background) and
by ``close``. For the algorithms that count per window a unit given back after its window
ended is gone with the window; a process killed while holding a slice loses it: the store
cannot know what it granted, so it counts the slice as spent (and, for the algorithms that
refill, stops holding it back ``ttl`` after it was taken).

**When the budget is spent.** The store's refusal is answered locally until it says one unit
fits again, but at least ``horizon`` and at most ``ttl`` seconds, so a refused hot key costs
the store one exchange per process every so often, not one per hit.

**What a decision says.** An allowed hit from a slice reports the store's ``limit`` and
``reset_after`` as of the slice's exchange, and as ``remaining`` what is left of this
process's slice plus what the store had left after it: an estimate, stale by up to the
slice's age (other processes may have taken since, and hold slices of their own).

When the store fails, an exchange raises ``StoreError`` (what it gave back is lost: never an
over-admission), for the failure policy around this wrapper to answer (``resilience``).
Attributes it does not have are the wrapped store's.

``Leasing`` (threads) and ``AsyncLeasing`` (asyncio, ``async_leasing.py``) are twins: only I/O
differs. What they share, the slices and their sizing, is ``slices.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Unpack

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import StoreError
from ratekeeper.core.inputs import check_hit, check_hits, check_now
from ratekeeper.core.limits import Limit
from ratekeeper.core.ticker import Ticker
from ratekeeper.core.wording import many
from ratekeeper.stores.contract import Admitted, Health, Hit, LeasingStore
from ratekeeper.stores.wrappers.async_leasing import AsyncLeasing
from ratekeeper.stores.wrappers.slices import (
    HORIZON,
    SHARE,
    TTL,
    Options,
    Slice,
    Slices,
    check_options,
    leased,
    looked,
    merged,
    stamped,
)

__all__ = ["HORIZON", "SHARE", "TTL", "AsyncLeasing", "Leasing", "check_options"]

log = logging.getLogger("ratekeeper.store")


class Leasing(Slices[LeasingStore]):
    """Wrap a store that leases (``LeasingStore``); answer the hits of leased limits from
    slices (see the module). ``ttl``, ``horizon`` and ``share`` as the module says;
    ``clock`` is monotonic seconds. With ``background=False`` no thread sweeps: the caller
    calls ``sweep()`` every ``ttl`` seconds of its ``clock`` (what a simulation on a virtual
    clock does). Thread-safe."""

    def __init__(self, store: LeasingStore, **options: Unpack[Options]) -> None:
        super().__init__(store, **options)
        self._lock = threading.Lock()  # the slices' counts, and the table of slices
        self._ticker = Ticker(self.ttl, self.sweep, "ratekeeper-leases", log)

    def _after_fork(self) -> None:
        super()._after_fork()
        self._lock = threading.Lock()

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        if limit.sync != "leased" or now is not None or cost == 0:
            return self.store.apply(key, limit, cost, now)
        if key.__class__ is not str or cost.__class__ is not int or cost < 0:
            key, cost = check_hit(key, cost)
        evicted = None
        with self._lock:
            t = self.clock()  # under the lock: a thread paused here must not grant late
            piece = self.slices.get((limit.id, key))
            if piece is not None:
                piece.asked += cost
                if piece.left >= cost and t < piece.until:
                    self.granted += cost
                    return piece.grant(cost, t)
                if t < piece.refused_until:
                    return piece.refuse(t)
            else:
                piece = self.slices[(limit.id, key)] = Slice(key, limit, t)
                piece.asked = cost
                piece.lock = threading.Lock()
                evicted = self._evicted()
        if evicted is not None:
            self._give_back(evicted)
        return self._exchange(piece, cost)

    def _exchange(self, piece: Slice, cost: int) -> Decision:
        """Give back what is left of ``piece`` and take a new slice, one exchange at a time."""
        with piece.lock:
            with self._lock:
                t = self.clock()
                if piece.left >= cost and t < piece.until:  # another thread's exchange
                    self.granted += cost
                    return piece.grant(cost, t)
                if t < piece.refused_until:
                    return piece.refuse(t)
                want = self._want(piece, cost, t)
                returned, piece.left = piece.left, 0
            if self.background:
                self._ticker.start()
            taken = self.store.lease(  # a StoreError loses what was returned: never over-admits
                piece.key,
                piece.limit,
                want,
                holder=self.holder,
                ttl=self.ttl,
                returned=returned,
                taken_at=piece.taken_at,
                need=cost,
            )
            with self._lock:
                return self._took(piece, taken, t, want, cost)

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        """The leased hits from slices, the others from the store in one batch. With
        ``all_or_nothing``, a refusal on either side gives back what the other granted: the
        slices' units to the slices; when a slice refused, the store's hits are only looked
        at (cost 0, reported allowed when their cost fits), but for those under a limit with
        debt, which count whatever the others do."""
        if now is not None or not any(limit.sync == "leased" for _, limit, _ in hits):
            return self.store.apply_many(hits, all_or_nothing=all_or_nothing, now=now)
        return self._many(check_hits(hits), all_or_nothing, self.store.apply_many)

    def _many(
        self, hits: list[Hit], all_or_nothing: bool, exact: Callable[..., list[Decision]]
    ) -> list[Decision]:
        """``apply_many`` of checked ``hits``, some leased: the others go to ``exact(batch,
        all_or_nothing=...)`` in one call."""
        results: list[Any] = [None] * len(hits)
        granted: list[tuple[int, Slice, int]] = []
        for index, (key, limit, cost) in enumerate(hits):
            if limit.sync == "leased" and cost:
                results[index] = one = self.apply(key, limit, cost)
                piece = self.slices.get((limit.id, key))
                if one.granted and piece is not None:
                    granted.append((index, piece, piece.generation))
        rest = [index for index, one in enumerate(results) if one is None]
        refused = all_or_nothing and not all(one.allowed for one in results if one is not None)
        if rest:
            batch = [hits[index] for index in rest]
            if refused:
                answers = self._looked(batch)
            else:
                answers = exact(batch, all_or_nothing=all_or_nothing)
                refused = all_or_nothing and not all(
                    one.allowed for one, hit in zip(answers, batch, strict=True) if not hit[1].debt
                )
            for index, one in zip(rest, answers, strict=True):
                results[index] = one
        if refused and granted:
            with self._lock:
                self._undo(results, granted)
        return results

    def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        """The store's ``admit``; the hits of leased limits are answered from slices, each
        with this wrapper's clock once they are granted as its time, so that a hit granted
        from the slice its own exchange took is refunded into it. The others (a batch may mix
        them) are admitted by the store, each with the time the store gave it."""
        if not any(limit.sync == "leased" for _, limit, _ in hits):
            return self.store.admit(hits, all_or_nothing=all_or_nothing)
        stamps: list[float] = []

        def exact(batch: list[Hit], *, all_or_nothing: bool) -> list[Decision]:
            answers = self.store.admit(batch, all_or_nothing=all_or_nothing)
            stamps.extend(at for _, at in answers)
            return [decision for decision, _ in answers]

        checked = check_hits(hits)
        decisions = self._many(checked, all_or_nothing, exact)
        return stamped(checked, decisions, stamps, self.clock())

    def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        """The store's ``refund``; under a leased limit, the units go back into this process's
        slice, if the slice they were granted from is still the live one (else nothing)."""
        if not leased(limit):
            self.store.refund(key, limit, cost, at)
            return
        key, cost = check_hit(key, cost)
        at = check_now(at)
        with self._lock:
            self._put_back(key, limit, cost, at)

    def _looked(self, hits: list[Hit]) -> list[Decision]:
        """``hits`` looked at (cost 0) in the store, each reported allowed when its cost fits
        and granted 0, but those under a limit with debt, which are counted."""
        debts, looks = looked(hits)
        counted = self.store.apply_many(debts) if debts else []
        seen = self.store.apply_many(looks) if looks else []
        return merged(hits, counted, seen)

    def _give_back(self, piece: Slice, ended: bool = False) -> None:
        """Give back what is left of ``piece`` (an exchange that takes nothing), and the
        store's record of it; with ``ended``, only if it has ended (an exchange may have
        renewed it meanwhile)."""
        with piece.lock:
            with self._lock:
                if ended and self.clock() < piece.until:
                    return
                returned, piece.left = piece.left, 0
            if not self._worth_giving_back(piece, returned, ended):
                return
            self.returns += 1
            try:
                self.store.lease(
                    piece.key,
                    piece.limit,
                    0,
                    holder=self.holder,
                    ttl=self.ttl,
                    returned=returned,
                    taken_at=piece.taken_at,
                )
            except StoreError as error:
                log.warning(
                    "leases: could not give back %s of %s: %s",
                    many(returned, "unit"),
                    piece.key,
                    error,
                )

    def sweep(self) -> int:
        """Give back what the slices that ended hold, and forget the idle ones; return how
        many were given back. Runs every ``ttl`` seconds on a thread once a slice is taken
        (unless ``background=False``)."""
        with self._lock:
            due = self._returns(self.clock())
        for piece in due:
            self._give_back(piece, ended=True)
        return len(due)

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        return self.store.release(key, limit, slots, now)

    def ping(self) -> Health:
        return self.store.ping()

    def reset(self, key: str, limit: Limit) -> None:
        with self._lock:
            self.slices.pop((limit.id, key), None)
        self.store.reset(key, limit)

    def close(self) -> None:
        """Give back every slice, then close the store."""
        self._ticker.stop()
        with self._lock:
            pieces = list(self.slices.values())
            self.slices = {}
        for piece in pieces:
            self._give_back(piece)
        self.store.close()
