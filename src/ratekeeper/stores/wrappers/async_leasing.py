"""``AsyncLeasing``: the asyncio twin of ``leasing.Leasing`` (see that module): only I/O
differs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Unpack

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import StoreError
from ratekeeper.core.inputs import check_hit, check_hits, check_now
from ratekeeper.core.limits import Limit
from ratekeeper.core.wording import many
from ratekeeper.stores.contract import Admitted, AsyncLeasingStore, Health, Hit
from ratekeeper.stores.wrappers.slices import (
    Options,
    Slice,
    Slices,
    leased,
    looked,
    merged,
    stamped,
)

log = logging.getLogger("ratekeeper.store")


class AsyncLeasing(Slices[AsyncLeasingStore]):
    """The asyncio twin of ``Leasing``; its sweep runs as a task on the loop of its calls
    (none with ``background=False``)."""

    def __init__(self, store: AsyncLeasingStore, **options: Unpack[Options]) -> None:
        super().__init__(store, **options)
        self._sweeper: asyncio.Task[None] | None = None

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision:
        if limit.sync != "leased" or now is not None or cost == 0:
            return await self.store.apply(key, limit, cost, now)
        if key.__class__ is not str or cost.__class__ is not int or cost < 0:
            key, cost = check_hit(key, cost)
        t = self.clock()
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
            evicted = self._evicted()
            if evicted is not None:
                await self._give_back(evicted)
        return await self._exchange(piece, cost)

    async def _exchange(self, piece: Slice, cost: int) -> Decision:
        while piece.pending is not None:  # one exchange at a time: wait for the one under way
            await asyncio.shield(piece.pending)
            t = self.clock()
            if piece.left >= cost and t < piece.until:
                self.granted += cost
                return piece.grant(cost, t)
            if t < piece.refused_until:
                return piece.refuse(t)
        t = self.clock()
        want = self._want(piece, cost, t)
        returned, piece.left = piece.left, 0
        loop = asyncio.get_running_loop()
        piece.pending = loop.create_future()
        if self.background:
            self._sweep_on(loop)
        try:
            taken = await self.store.lease(
                piece.key,
                piece.limit,
                want,
                holder=self.holder,
                ttl=self.ttl,
                returned=returned,
                taken_at=piece.taken_at,
                need=cost,
            )
        finally:
            pending, piece.pending = piece.pending, None
            pending.set_result(None)
        return self._took(piece, taken, t, want, cost)

    async def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        if now is not None or not any(limit.sync == "leased" for _, limit, _ in hits):
            return await self.store.apply_many(hits, all_or_nothing=all_or_nothing, now=now)
        return await self._many(check_hits(hits), all_or_nothing, self.store.apply_many)

    async def _many(
        self, hits: list[Hit], all_or_nothing: bool, exact: Callable[..., Awaitable[list[Decision]]]
    ) -> list[Decision]:
        results: list[Any] = [None] * len(hits)
        granted: list[tuple[int, Slice, int]] = []
        for index, (key, limit, cost) in enumerate(hits):
            if limit.sync == "leased" and cost:
                results[index] = one = await self.apply(key, limit, cost)
                piece = self.slices.get((limit.id, key))
                if one.granted and piece is not None:
                    granted.append((index, piece, piece.generation))
        rest = [index for index, one in enumerate(results) if one is None]
        refused = all_or_nothing and not all(one.allowed for one in results if one is not None)
        if rest:
            batch = [hits[index] for index in rest]
            if refused:
                answers = await self._looked(batch)
            else:
                answers = await exact(batch, all_or_nothing=all_or_nothing)
                refused = all_or_nothing and not all(
                    one.allowed for one, hit in zip(answers, batch, strict=True) if not hit[1].debt
                )
            for index, one in zip(rest, answers, strict=True):
                results[index] = one
        if refused and granted:
            self._undo(results, granted)
        return results

    async def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        if not any(limit.sync == "leased" for _, limit, _ in hits):
            return await self.store.admit(hits, all_or_nothing=all_or_nothing)
        stamps: list[float] = []

        async def exact(batch: list[Hit], *, all_or_nothing: bool) -> list[Decision]:
            answers = await self.store.admit(batch, all_or_nothing=all_or_nothing)
            stamps.extend(at for _, at in answers)
            return [decision for decision, _ in answers]

        checked = check_hits(hits)
        decisions = await self._many(checked, all_or_nothing, exact)
        return stamped(checked, decisions, stamps, self.clock())

    async def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        if not leased(limit):
            await self.store.refund(key, limit, cost, at)
            return
        key, cost = check_hit(key, cost)
        self._put_back(key, limit, cost, check_now(at))

    async def _looked(self, hits: list[Hit]) -> list[Decision]:
        debts, looks = looked(hits)
        counted = await self.store.apply_many(debts) if debts else []
        seen = await self.store.apply_many(looks) if looks else []
        return merged(hits, counted, seen)

    async def _give_back(self, piece: Slice, ended: bool = False) -> None:
        while piece.pending is not None:
            await asyncio.shield(piece.pending)
        if ended and self.clock() < piece.until:
            return
        returned, piece.left = piece.left, 0
        if not self._worth_giving_back(piece, returned, ended):
            return
        self.returns += 1
        try:
            await self.store.lease(
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
                "leases: could not give back %s of %s: %s", many(returned, "unit"), piece.key, error
            )

    async def sweep(self) -> int:
        due = self._returns(self.clock())
        for piece in due:
            await self._give_back(piece, ended=True)
        return len(due)

    def _sweep_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run ``sweep`` every ``ttl`` seconds on ``loop``, from the first exchange on."""
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = loop.create_task(self._sweeping())

    async def _sweeping(self) -> None:
        while True:
            await asyncio.sleep(self.ttl)
            try:
                await self.sweep()
            except Exception:  # a background duty must outlive a surprise
                log.exception("leases: the sweep failed")

    async def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision:
        return await self.store.release(key, limit, slots, now)

    async def ping(self) -> Health:
        return await self.store.ping()

    async def reset(self, key: str, limit: Limit) -> None:
        self.slices.pop((limit.id, key), None)
        await self.store.reset(key, limit)

    async def close(self) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
        pieces = list(self.slices.values())
        self.slices = {}
        for piece in pieces:
            await self._give_back(piece)
        await self.store.close()
