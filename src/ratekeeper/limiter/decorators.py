"""The functions the twins' ``limit`` decorators return: each call counted against a store's
limits before it runs (``counted``), or counted, then given back unless its outcome is charged
(``counted_by_outcome``). The sync functions and their asyncio twins (``counted_async``,
``counted_by_outcome_async``) are line-aligned: only I/O differs. ``Limiter.limit`` and
``AsyncLimiter.limit`` check the options and state the contract.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from ratekeeper.core.errors import RateLimitExceeded, StoreError
from ratekeeper.core.limits import Limit
from ratekeeper.limiter.shared import Charging, Refund, last_refusal, refunds_of, unrefunded
from ratekeeper.stores import AsyncStore, Store

P = ParamSpec("P")
R = TypeVar("R")


def counted(
    store: Store,
    function: Callable[P, R],
    key_of: Callable[..., str],
    limits: tuple[Limit, ...],
    cost: int,
) -> Callable[P, R]:
    """``function``, each call a hit of ``cost`` on its key under every one of ``limits``, all
    or nothing; a refused call raises ``RateLimitExceeded`` and never runs."""
    apply, apply_many = store.apply, store.apply_many
    one = limits[0]

    # One limit: one store call and no other call in front of the function's own.
    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        name = key_of(*args, **kwargs)
        decision = apply(name, one, cost, None)
        if not decision[0]:
            raise RateLimitExceeded(decision, name)
        return function(*args, **kwargs)

    @functools.wraps(function)
    def wrapper_many(*args: P.args, **kwargs: P.kwargs) -> R:
        name = key_of(*args, **kwargs)
        batch = [(name, limit, cost) for limit in limits]
        refusal = last_refusal(apply_many(batch, all_or_nothing=True))
        if refusal is not None:
            raise RateLimitExceeded(refusal, name)
        return function(*args, **kwargs)

    return wrapper if len(limits) == 1 else wrapper_many


def counted_by_outcome(
    store: Store,
    function: Callable[P, R],
    key_of: Callable[..., str],
    limits: tuple[Limit, ...],
    cost: int,
    *,
    charges: Charging,
) -> Callable[P, R]:
    """``function`` counted before each call, and given back unless ``charges`` says its
    outcome is charged."""
    admit, refund = store.admit, store.refund

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        name = key_of(*args, **kwargs)
        admitted = admit([(name, limit, cost) for limit in limits], all_or_nothing=True)
        refusal = last_refusal([decision for decision, _ in admitted])
        if refusal is not None:
            raise RateLimitExceeded(refusal, name)
        try:
            result = function(*args, **kwargs)
        except BaseException as error:
            if not charges(None, error):
                give_back(refunds_of(name, limits, admitted))
            raise
        if not charges(result, None):
            give_back(refunds_of(name, limits, admitted))
        return result

    def give_back(refunds: list[Refund]) -> None:
        for one in refunds:
            try:
                refund(*one)
            except StoreError as error:
                unrefunded(one[0], error)

    return wrapper


def counted_async(
    store: AsyncStore,
    function: Callable[P, Coroutine[Any, Any, R]],
    key_of: Callable[..., str],
    limits: tuple[Limit, ...],
    cost: int,
) -> Callable[P, Coroutine[Any, Any, R]]:
    """The asyncio twin of ``counted``: the decorated function is still a coroutine function."""
    apply, apply_many = store.apply, store.apply_many
    one = limits[0]

    # One limit: one store call and no other call in front of the function's own.
    @functools.wraps(function)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        name = key_of(*args, **kwargs)
        decision = await apply(name, one, cost, None)
        if not decision[0]:
            raise RateLimitExceeded(decision, name)
        return await function(*args, **kwargs)

    @functools.wraps(function)
    async def wrapper_many(*args: P.args, **kwargs: P.kwargs) -> R:
        name = key_of(*args, **kwargs)
        batch = [(name, limit, cost) for limit in limits]
        refusal = last_refusal(await apply_many(batch, all_or_nothing=True))
        if refusal is not None:
            raise RateLimitExceeded(refusal, name)
        return await function(*args, **kwargs)

    return wrapper if len(limits) == 1 else wrapper_many


def counted_by_outcome_async(
    store: AsyncStore,
    function: Callable[P, Coroutine[Any, Any, R]],
    key_of: Callable[..., str],
    limits: tuple[Limit, ...],
    cost: int,
    *,
    charges: Charging,
) -> Callable[P, Coroutine[Any, Any, R]]:
    """The asyncio twin of ``counted_by_outcome``."""
    admit, refund = store.admit, store.refund

    @functools.wraps(function)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        name = key_of(*args, **kwargs)
        admitted = await admit([(name, limit, cost) for limit in limits], all_or_nothing=True)
        refusal = last_refusal([decision for decision, _ in admitted])
        if refusal is not None:
            raise RateLimitExceeded(refusal, name)
        try:
            result = await function(*args, **kwargs)
        except BaseException as error:
            if not charges(None, error):
                await give_back(refunds_of(name, limits, admitted))
            raise
        if not charges(result, None):
            await give_back(refunds_of(name, limits, admitted))
        return result

    async def give_back(refunds: list[Refund]) -> None:
        for one in refunds:
            try:
                await refund(*one)
            except StoreError as error:
                unrefunded(one[0], error)

    return wrapper
