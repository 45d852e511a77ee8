"""What web middleware and other surfaces need of whatever decides: ``Decider`` and its twin.

``Limiter`` and ``Engine`` are ``Decider``s; ``AsyncLimiter`` and ``AsyncEngine`` are
``AsyncDecider``s, and so are the decision service's clients, ``RemoteLimiter`` and
``AsyncRemoteLimiter`` (a ``Limiter`` and an ``AsyncLimiter``). Code written
against these protocols takes any of them: a limit given with the call (a ``Limit`` or a rate
string) is counted on ``key``; ``peek`` counts nothing; ``reset`` forgets the key's count.

Some deciders do more, each with its twin: a limiter decides several hits in one call
(``ManyDecider``, ``hit_many``) and gives back what it granted (``RefundDecider``, ``admit``
and ``refund``), an engine decides Envoy descriptors by its rules (``DescriptorDecider``,
``check``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ratekeeper.core.decisions import Decision
    from ratekeeper.core.limits import Limit
    from ratekeeper.engine.verdict import Descriptor, Verdict
    from ratekeeper.rules.model import Entry
    from ratekeeper.stores.memory import Admitted


@runtime_checkable
class Decider(Protocol):
    """Decides hits: ``hit(key, limit, cost=1)``, ``peek(key, limit)``, ``reset(key, limit)``."""

    def hit(self, key: str, limit: Limit | str, cost: int = 1) -> Decision: ...

    def peek(self, key: str, limit: Limit | str) -> Decision: ...

    def reset(self, key: str, limit: Limit | str) -> None: ...


@runtime_checkable
class AsyncDecider(Protocol):
    """The asyncio twin of ``Decider``."""

    async def hit(self, key: str, limit: Limit | str, cost: int = 1) -> Decision: ...

    async def peek(self, key: str, limit: Limit | str) -> Decision: ...

    async def reset(self, key: str, limit: Limit | str) -> None: ...


@runtime_checkable
class ManyDecider(Protocol):
    """Decides several hits in one call: ``hit_many([(key, limit, cost), ...],
    all_or_nothing=True)``, a decision per limit, in order (see ``Limiter.hit_many``).
    ``atomic_hit_many`` says whether that is one atomic store call (``Limiter``) or the hits
    one by one (``RemoteLimiter``: the service takes one hit per call)."""

    atomic_hit_many: bool

    def hit_many(
        self, hits: Iterable[tuple[str, Limit | str, int]], *, all_or_nothing: bool = True
    ) -> list[Decision]: ...


@runtime_checkable
class AsyncManyDecider(Protocol):
    """The asyncio twin of ``ManyDecider``."""

    atomic_hit_many: bool

    async def hit_many(
        self, hits: Iterable[tuple[str, Limit | str, int]], *, all_or_nothing: bool = True
    ) -> list[Decision]: ...


@runtime_checkable
class RefundDecider(Protocol):
    """Decides hits it can give back: ``admit([(key, limit, cost), ...], all_or_nothing=True)``,
    each decision with the time it was taken at, and ``refund(key, limit, cost, at)`` (see
    ``Limiter.admit``)."""

    def admit(
        self, hits: Iterable[tuple[str, Limit | str, int]], *, all_or_nothing: bool = True
    ) -> list[Admitted]: ...

    def refund(self, key: str, limit: Limit | str, cost: int, at: float) -> None: ...


@runtime_checkable
class AsyncRefundDecider(Protocol):
    """The asyncio twin of ``RefundDecider``."""

    async def admit(
        self, hits: Iterable[tuple[str, Limit | str, int]], *, all_or_nothing: bool = True
    ) -> list[Admitted]: ...

    async def refund(self, key: str, limit: Limit | str, cost: int, at: float) -> None: ...


@runtime_checkable
class DescriptorDecider(Protocol):
    """Decides a request's Envoy descriptors by the rules of ``domain``: ``check(domain,
    descriptors, hits=1, all_or_nothing=False)`` (see ``Engine.check``)."""

    def check(
        self,
        domain: str,
        descriptors: Sequence[Descriptor | Sequence[Entry]],
        hits: int = 1,
        *,
        all_or_nothing: bool = False,
    ) -> Verdict: ...


@runtime_checkable
class AsyncDescriptorDecider(Protocol):
    """The asyncio twin of ``DescriptorDecider``."""

    async def check(
        self,
        domain: str,
        descriptors: Sequence[Descriptor | Sequence[Entry]],
        hits: int = 1,
        *,
        all_or_nothing: bool = False,
    ) -> Verdict: ...


if TYPE_CHECKING:  # mypy holds each of them to its protocols
    from ratekeeper.engine import AsyncEngine, Engine
    from ratekeeper.limiter import AsyncLimiter, Limiter

    def _held(
        limiter: Limiter, engine: Engine
    ) -> tuple[Decider, ManyDecider, RefundDecider, Decider, DescriptorDecider]:
        return limiter, limiter, limiter, engine, engine

    def _async_held(
        limiter: AsyncLimiter, engine: AsyncEngine
    ) -> tuple[
        AsyncDecider, AsyncManyDecider, AsyncRefundDecider, AsyncDecider, AsyncDescriptorDecider
    ]:
        return limiter, limiter, limiter, engine, engine
