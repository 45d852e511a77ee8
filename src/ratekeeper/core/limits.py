"""A limit: how much, per how long, and by which algorithm."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from math import isfinite
from typing import TYPE_CHECKING, Any

from ratekeeper.core.errors import InvalidLimitError
from ratekeeper.core.periods import parse_period, spoken
from ratekeeper.core.registry import Algorithm, spec

if TYPE_CHECKING:
    from ratekeeper.core.decisions import Decision

#: Nominal lengths of the calendar units; with ``calendar=True`` the fixed window follows the
#: real UTC calendar instead.
CALENDAR_PERIODS = {86_400.0: "day", 604_800.0: "week", 2_592_000.0: "month", 31_536_000.0: "year"}

#: A bucketed sliding window keeps at most this many sub-buckets per key.
MAX_BUCKETS = 3_600

#: The largest amount or burst: 2**53 - 1, the largest integer every store counts exactly.
MAX_AMOUNT = 2**53 - 1
#: The shortest period, one millisecond, and the longest, 100 years of 365 days: every store
#: can then express a key's time to live, and every rate is a finite number.
MIN_PERIOD = 0.001
MAX_PERIOD = 100 * 31_536_000.0

#: The algorithms that cannot hold a debt (``Limit(debt=True)``), and why.
NO_DEBT = {
    Algorithm.SLIDING_LOG: (
        "its log keeps one entry per unit counted, at most the amount, and a debt would grow "
        "it without bound; bucketed_window or sliding_counter hold one in a count"
    ),
    Algorithm.CONCURRENCY: "it holds slots, which are given back, not paid back over time",
}

#: How a limit's decisions are shared between the processes using one store: ``exact``, each
#: decision taken in the store; ``leased``, each process granting from a slice of the budget
#: it took from the store (``ratekeeper.stores.wrappers.leasing``).
SYNCS = ("exact", "leased")


def algorithm_of(name: Algorithm | str) -> Algorithm:
    """The ``Algorithm`` named ``name``; ``InvalidLimitError`` naming the known ones if none."""
    try:
        return Algorithm(name)
    except ValueError:
        names = ", ".join(a.value for a in Algorithm)
        raise InvalidLimitError(f"unknown algorithm {name!r}; expected one of: {names}") from None


class Limit:
    """``amount`` per ``period`` seconds, enforced by ``algorithm``.

    ``period`` is seconds, or a period string such as ``"5m"``. Parameters, each accepted only
    by the algorithms it applies to:

    ``burst``
        The bucket size of ``token_bucket``, ``gcra``, ``leaky_bucket`` and ``leaky_shaper``
        (the shaper's queue capacity). Defaults to ``amount``; the sustained rate stays
        ``amount / period``.
    ``granularity``
        Seconds per sub-bucket of ``bucketed_window``; defaults to ``period / 60``.
    ``calendar``
        ``fixed_window`` only: windows follow the UTC calendar day, ISO week (from Monday),
        month or year. The period must be exactly one such unit.
    ``partial``
        ``token_bucket`` only: a hit costing more than the tokens left takes the whole tokens
        there are (``Decision.granted``) instead of being denied.
    ``debt``
        Every hit counts, refused or not: a hit that does not fit is refused and counted all
        the same (its ``Decision.granted`` is its cost), so the count can pass the limit. What
        it passes by is a debt that refuses later hits, a look (cost 0) included, until time
        pays it back; ``remaining`` is then 0 and ``retry_after`` says when enough of the debt
        is paid back for a hit of that cost. This is how a charge for work already done is
        kept (``Limiter.charge``); a cost above the limit's capacity is counted too, and its
        ``retry_after`` is infinite. Each algorithm holds its debt in its own state (see
        ``ratekeeper.algorithms``); ``sliding_log`` and ``concurrency`` cannot hold one, nor
        can a ``partial`` token bucket, which grants what it has. ``debt`` is not part of the
        counters' identity: a limit with it and the same limit without it count on the same
        state.
    ``sync``
        ``"exact"`` (the default): every decision is taken in the store. ``"leased"``: on a
        shared store, each process takes a slice of the key's budget from the store in one
        atomic step and grants from it locally, giving back what it did not use; the limit is
        never exceeded, at the price of budget held idle in slices
        (``ratekeeper.stores.wrappers.leasing``). For the algorithms whose counting allows it
        (``LEASES``); ``sync`` is not part of the counters' identity either.

    For ``concurrency``, ``amount`` is the number of slots in flight and ``period`` the slot TTL.

    A limit is immutable and hashable; two limits with the same parameters are equal and share
    their counters in a store (so do two that differ only in ``debt``). Raises
    ``InvalidLimitError`` for a parameter the algorithm does not take or a value out of range.
    Example::

        Limit(100, 60, "token_bucket", burst=20)
    """

    __slots__ = (
        "algorithm",
        "amount",
        "bucket",
        "burst",
        "calendar",
        "capacity",
        "copy_state",
        "debt",
        "granularity",
        "id",
        "interval",
        "partial",
        "period",
        "rate",
        "step",
        "sync",
        "unit",
    )

    algorithm: Algorithm
    amount: int
    period: float
    burst: int | None
    granularity: float | None
    calendar: bool
    partial: bool
    debt: bool
    sync: str
    # Derived once here, so that no decision recomputes them.
    capacity: int
    rate: float
    interval: float
    bucket: float
    unit: str
    id: str
    step: Callable[[Any, float, int, Limit], tuple[Any, Decision]]
    copy_state: Callable[[Any], Any] | None

    def __init__(
        self,
        amount: int,
        period: float | str,
        algorithm: Algorithm | str = Algorithm.FIXED_WINDOW,
        *,
        burst: int | None = None,
        granularity: float | None = None,
        calendar: bool = False,
        partial: bool = False,
        debt: bool = False,
        sync: str = "exact",
    ) -> None:
        algorithm = algorithm_of(algorithm)
        behaviour = spec(algorithm)
        amount = _count("amount", amount)
        period = _period(period)
        capacity = amount
        if burst is not None:
            if not behaviour.takes_burst:
                raise InvalidLimitError(f"burst does not apply to {algorithm.value}")
            capacity = burst = _count("burst", burst)
        bucketed = algorithm is Algorithm.BUCKETED_WINDOW
        if granularity is not None and not bucketed:
            raise InvalidLimitError(f"granularity does not apply to {algorithm.value}")
        bucket = _bucket(period, granularity) if bucketed else 0.0
        unit = _calendar_unit(algorithm, period) if calendar else ""
        _check_modes(algorithm, behaviour.no_lease, partial, debt, sync)

        params = "".join(
            (
                f":b{capacity}" if burst is not None else "",
                f":g{_exact(bucket)}" if bucketed else "",
                ":cal" if calendar else "",
                ":p" if partial else "",
            )
        )
        fields = {
            "algorithm": algorithm,
            "amount": amount,
            "period": period,
            "burst": burst,
            "granularity": bucket if bucketed else None,
            "calendar": bool(calendar),
            "partial": bool(partial),
            "debt": debt,
            "sync": sync,
            "capacity": capacity,
            "rate": amount / period,
            "interval": period / amount,
            "bucket": bucket,
            "unit": unit,
            "id": f"{algorithm.value}:{amount}/{_exact(period)}{params}",
            "step": behaviour.step,
            "copy_state": behaviour.copy_state,
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Limit is immutable; cannot set {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.amount, self.period, self.algorithm.value, self._params()))

    def _params(self) -> dict[str, Any]:
        return {
            name: getattr(self, name)
            for name in ("burst", "granularity", "calendar", "partial", "debt", "sync")
            if getattr(self, name) not in (None, False, "exact")
        }

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Limit)
            and other.id == self.id
            and other.debt == self.debt
            and other.sync == self.sync
        )

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        extras = "".join(f", {name}={value!r}" for name, value in self._params().items())
        return f"Limit({self.amount}, {_exact(self.period)}, {self.algorithm.value!r}{extras})"

    def __str__(self) -> str:
        """The rate as a person reads it, and the algorithm: ``3/month (fixed_window)``,
        ``5/15 minutes (gcra)``. The rate before the space-and-parenthesis reads back with
        ``ratekeeper.core.rates.parse`` as the same amount and period; ``repr`` is the
        constructor call."""
        return f"{self.amount}/{spoken(self.period)} ({self.algorithm.value})"


def _exact(seconds: float) -> str:
    """``seconds`` as short as ``:g`` writes it when that reads back as the same number (``60``,
    ``0.5``), else every digit (``1234567.0``, not ``1.23457e+06``): a limit's id must tell
    apart limits whose periods differ in the seventh digit, or they would share counters."""
    short = f"{seconds:g}"
    return short if float(short) == seconds else repr(float(seconds))


def _count(name: str, value: Any) -> int:
    """An amount or burst: an ``int`` (not ``bool``) from 1 to ``MAX_AMOUNT``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_AMOUNT:
        raise InvalidLimitError(f"{name} must be an integer from 1 to {MAX_AMOUNT}, not {value!r}")
    return int(value)


def _period(period: Any) -> float:
    """A period: seconds or a period string (``"5m"``), from ``MIN_PERIOD`` to ``MAX_PERIOD``."""
    if isinstance(period, str):
        period = parse_period(period)
    if (
        isinstance(period, bool)
        or not isinstance(period, int | float)
        or not MIN_PERIOD <= period <= MAX_PERIOD
    ):
        raise InvalidLimitError(
            f"period must be finite seconds from {MIN_PERIOD:g} to {MAX_PERIOD:g}, not {period!r}"
        )
    return float(period)


def _bucket(period: float, granularity: Any) -> float:
    """A bucketed window's seconds per sub-bucket: ``granularity``, or ``period / 60``; at most
    the period, and at most ``MAX_BUCKETS`` of them in a window."""
    bucket = period / 60 if granularity is None else granularity
    if isinstance(bucket, bool) or not isinstance(bucket, int | float) or not isfinite(bucket):
        raise InvalidLimitError(f"granularity must be finite seconds, not {granularity!r}")
    bucket = float(bucket)
    if not 0 < bucket <= period:
        raise InvalidLimitError(
            f"granularity must be positive and at most the period ({period:g}s), "
            f"not {granularity!r}"
        )
    if period / bucket > MAX_BUCKETS:
        raise InvalidLimitError(
            f"granularity {bucket:g}s makes {period / bucket:.0f} buckets per "
            f"window; at most {MAX_BUCKETS} are allowed"
        )
    return bucket


def _calendar_unit(algorithm: Algorithm, period: float) -> str:
    """The calendar unit of a fixed window of ``calendar=True``: ``"day"`` for 86,400 s."""
    if algorithm is not Algorithm.FIXED_WINDOW:
        raise InvalidLimitError(f"calendar does not apply to {algorithm.value}")
    unit = CALENDAR_PERIODS.get(period, "")
    if not unit:
        raise InvalidLimitError(
            "calendar windows need a period of exactly one day, week, month or year, "
            f"not {period:g}s"
        )
    return unit


def _check_modes(algorithm: Algorithm, no_lease: str, partial: bool, debt: Any, sync: Any) -> None:
    """``partial``, ``debt`` and ``sync`` where ``algorithm`` takes them, and with each other."""
    if partial and algorithm is not Algorithm.TOKEN_BUCKET:
        raise InvalidLimitError(f"partial does not apply to {algorithm.value}")
    if not isinstance(debt, bool):
        raise InvalidLimitError(f"debt is True or False, not {debt!r}")
    if debt:
        why = NO_DEBT.get(algorithm, "")
        if why:
            raise InvalidLimitError(f"debt does not apply to {algorithm.value}: {why}")
        if partial:
            raise InvalidLimitError(
                "debt does not combine with partial: a partial hit takes only the tokens "
                "there are, a hit with debt is counted whole"
            )
    if sync not in SYNCS:
        raise InvalidLimitError(f"sync must be 'exact' or 'leased', not {sync!r}")
    if sync == "leased":
        if no_lease:
            raise InvalidLimitError(
                f"sync 'leased' does not apply to {algorithm.value}: {no_lease}"
            )
        if partial or debt:
            raise InvalidLimitError(
                "sync 'leased' does not combine with "
                + ("partial: a partial hit takes what the store holds" if partial else "debt")
                + "; every such hit is counted in the store"
            )


def _rebuild(amount: int, period: float, algorithm: str, params: dict[str, Any]) -> Limit:
    return Limit(amount, period, algorithm, **params)


@lru_cache(maxsize=4096)
def charged(limit: Limit) -> Limit:
    """``limit`` counting every hit (``debt=True``), on the same counters: what a charge for
    work already done is counted under. Built once per limit; ``InvalidLimitError`` saying why
    for a limit that cannot hold a debt (``sliding_log``, ``concurrency``, a ``partial`` token
    bucket). Example::

        charged(Limit(100, 60)) == Limit(100, 60, debt=True)
    """
    if limit.debt:
        return limit
    params = limit._params()
    params.pop("sync", None)  # a charge is counted in the store
    return Limit(limit.amount, limit.period, limit.algorithm, **params, debt=True)


def with_debt(limit: Limit) -> Limit:
    """``charged(limit)`` (exact, not leased), or ``limit`` itself where it cannot hold a debt:
    such a limit then decides as it does without (how a whole engine counts every hit,
    ``AsyncEngine(debt=True)``).
    """
    if limit.debt or limit.partial or limit.algorithm in NO_DEBT:
        return limit
    return charged(limit)


def share_of(limit: Limit, instances: int) -> Limit:
    """``limit`` as each of ``instances`` processes enforces its share alone: the amount (and
    burst) divided by ``instances``, rounded down but at least 1, with the same period,
    algorithm and parameters. ``instances`` of these admit at most what ``limit`` admits,
    unless the amount is below ``instances`` (then each still admits 1). Example::

        share_of(Limit(100, 60, burst=20, algorithm="gcra"), 3) == Limit(33, 60, "gcra", burst=6)
    """
    if instances == 1:
        return limit
    params = limit._params()
    if limit.burst is not None:
        params["burst"] = max(limit.burst // instances, 1)
    return Limit(max(limit.amount // instances, 1), limit.period, limit.algorithm, **params)
