"""What ``Limiter`` and ``AsyncLimiter`` share, free of I/O: limits read from what the caller
gives (``Limit`` or rate string, kept parsed per limiter), ``hit_many``'s hits expanded, the
arithmetic of ``acquire``'s waiting, the key of a decorated call, and which of its outcomes
it is charged for.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from typing import Any

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import InvalidInputError, InvalidLimitError
from ratekeeper.core.inputs import check_key
from ratekeeper.core.limits import Limit
from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.core.rates import cached
from ratekeeper.stores import Admitted, Hit

log = logging.getLogger("ratekeeper.limiter")
#: Give-backs that failed: logged, throttled, never raised into the caller's result.
_unrefunded = LogThrottle(log)

#: A limit as the API takes it: a ``Limit`` or a rate string such as ``"10/minute"``.
LimitLike = Limit | str
#: What ``hit_many`` takes: ``(key, limit)`` or ``(key, limit, cost)``.
HitLike = tuple[str, LimitLike] | tuple[str, LimitLike, int]
#: The key of a decorated call: a fixed string, or a function of the call's arguments.
KeyLike = str | Callable[..., str] | None


#: How often a concurrency waiter looks for a freed slot: from the first to the last, doubling.
POLL = (0.005, 0.05)


def limits_of(limit: LimitLike, algorithm: Algorithm) -> tuple[Limit, ...]:
    """The limits ``limit`` holds; rate strings are read for ``algorithm``."""
    if isinstance(limit, Limit):
        return (limit,)
    if not isinstance(limit, str):
        raise InvalidLimitError(
            f"a limit is a Limit or a rate string such as '10/minute', not {limit!r}"
        )
    return cached(limit, algorithm)


def single(limit: LimitLike, algorithm: Algorithm) -> Limit:
    """The one limit ``limit`` holds (``InvalidLimitError`` when it holds several)."""
    limits = limits_of(limit, algorithm)
    if len(limits) != 1:
        raise InvalidLimitError(f"{limit!r} holds {len(limits)} limits; use hit_many for several")
    return limits[0]


def expand(hits: Iterable[HitLike], algorithm: Algorithm) -> list[Hit]:
    """``hit_many``'s hits as store hits, one per limit each holds."""
    if not isinstance(hits, Iterable):
        raise InvalidInputError(f"hit_many takes a list of hits, not {hits!r}")
    batch: list[Hit] = []
    for hit in hits:
        if not isinstance(hit, tuple | list) or len(hit) not in (2, 3):
            raise InvalidInputError(f"each hit is (key, limit) or (key, limit, cost), not {hit!r}")
        key, limit, cost = hit if len(hit) == 3 else (*hit, 1)
        batch.extend((key, one, cost) for one in limits_of(limit, algorithm))
    return batch


def check_timeout(timeout: float | None) -> float | None:
    """``acquire``'s timeout: None, or seconds >= 0 (``InvalidInputError`` otherwise)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise InvalidInputError(f"timeout must be None or seconds >= 0, not {timeout!r}")
    return float(timeout)


def give_up(
    decision: Decision, limit: Limit, cost: int, waited: float, timeout: float | None
) -> bool:
    """Whether ``acquire`` stops waiting after the refusal ``decision``.

    A concurrency slot may be released at any moment, so its waiter waits out its timeout;
    every other algorithm says when the hit could pass (``retry_after``).
    """
    if cost > limit.capacity:
        return True
    if timeout is None:
        return False
    if limit.algorithm is Algorithm.CONCURRENCY:
        return waited >= timeout
    return waited + decision.retry_after > timeout


def pause_after(
    decision: Decision, limit: Limit, poll: float, waited: float, timeout: float | None
) -> float:
    """How long ``acquire`` sleeps after the refusal ``decision`` before it tries again."""
    if limit.algorithm is not Algorithm.CONCURRENCY:
        return decision.retry_after
    pause = min(poll, decision.retry_after)
    return pause if timeout is None else min(pause, timeout - waited)


def last_refusal(decisions: list[Decision]) -> Decision | None:
    """The denying decision that frees up last, or None when all allowed."""
    denied = [decision for decision in decisions if not decision.allowed]
    return max(denied, key=lambda decision: decision.retry_after) if denied else None


def key_function(key: KeyLike, function: Callable[..., Any]) -> Callable[..., str]:
    """The key of each call of the decorated ``function``: by default, its qualified name."""
    if key is None:
        name = f"{function.__module__}.{function.__qualname__}"
        return lambda *args, **kwargs: name
    if isinstance(key, str) or not callable(key):
        fixed = check_key(key)
        return lambda *args, **kwargs: fixed
    return key


class Rates(dict[str, Limit]):
    """Rate strings parsed for one algorithm, kept (up to ``RATES`` of them) so that a hit given
    a string costs one dict lookup more than a hit given a ``Limit``."""

    __slots__ = ("algorithm",)

    def __init__(self, algorithm: Algorithm) -> None:
        super().__init__()
        self.algorithm = algorithm

    def __missing__(self, text: str) -> Limit:
        limit = single(text, self.algorithm)
        if len(self) >= RATES:
            self.clear()
        self[text] = limit
        return limit


#: How many rate strings a limiter keeps parsed.
RATES = 256


def concurrency_limit(limit: LimitLike) -> Limit:
    """The one concurrency limit ``limit`` holds (``InvalidLimitError`` otherwise)."""
    limit = single(limit, Algorithm.CONCURRENCY)
    if limit.algorithm is not Algorithm.CONCURRENCY:
        raise InvalidLimitError(
            f"concurrency() needs a concurrency limit, not {limit.algorithm.value}"
        )
    return limit


#: Whether a decorated call that returned ``result`` (None when it raised) or raised ``error``
#: is charged.
Charging = Callable[[Any, BaseException | None], bool]
#: A unit given back: ``(key, limit, granted, at)``.
Refund = tuple[str, Limit, int, float]


def check_charging(charge_on: Any, charge_when: Any) -> Charging | None:
    """How a decorated call is charged by its outcome (None: every call, before it runs):
    when it raises one of ``charge_on`` (an exception class or a tuple of them), or returns a
    result ``charge_when(result)`` says is charged. ``TypeError`` for bad ones."""
    if charge_on is None and charge_when is None:
        return None
    errors: tuple[type[BaseException], ...] = ()
    if charge_on is not None:
        errors = charge_on if isinstance(charge_on, tuple) else (charge_on,)
        if not errors or not all(
            inspect.isclass(error) and issubclass(error, BaseException) for error in errors
        ):
            raise TypeError(
                f"charge_on is an exception class or a tuple of them, not {charge_on!r}"
            )
    if charge_when is not None and not callable(charge_when):
        raise TypeError(f"charge_when is a test of the function's result, not {charge_when!r}")

    def charges(result: Any, error: BaseException | None) -> bool:
        if error is not None:
            return isinstance(error, errors)
        if charge_when is None:
            return False
        try:
            return bool(charge_when(result))
        except Exception:
            log.exception("charge_when raised: the call stays charged")
            return True

    return charges


def refunds_of(key: str, limits: Iterable[Limit], admitted: list[Admitted]) -> list[Refund]:
    """What a call admitted under ``limits`` gives back when its outcome is not charged: each
    allowed hit's granted units, but for those the failure policy decided (``degraded``)."""
    return [
        (key, limit, decision.granted, at)
        for limit, (decision, at) in zip(limits, admitted, strict=True)
        if decision.allowed and decision.granted and not decision.degraded
    ]


def unrefunded(key: str, error: Exception) -> None:
    """Log a give-back the store refused: its units stay counted."""
    _unrefunded.log(logging.WARNING, "could not give back a call on %r: %s", key, error)
