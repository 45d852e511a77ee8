"""Leased quotas in the simulator: what ``instances`` processes admit when they grant from slices
of one shared store, against the same limit kept exact.

Each limit is replayed twice, in trace order, on the trace's own time: once exact, every hit
applied to one ``MemoryStore`` (one store round trip per hit); once leased, the events dealt
round robin (event ``i`` of the trace to instance ``i mod instances``, whatever its key) to
``instances`` real ``ratekeeper.stores.wrappers.leasing.Leasing`` wrappers over one shared
``MemoryStore``. The stores and the wrappers all read the trace's time as their clock (a time
behind one already seen reads as the latest seen), no thread runs, and every ``ttl`` seconds of
trace time each instance's ``sweep`` gives back its ended slices. A round trip to the store
takes no trace time: an exchange is answered at the time of the hit that made it.

The numbers (``LeaseMeasures``): the units each run admitted, the store round trips each made
(the leased run's exchanges and give-backs, the exact run's one per hit), the most units
admitted in any window of the limit's period, for any key, and the units admitted per window
of the period (windows counted from time 0, as fixed windows are), for the plot.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import repeat
from math import inf, isfinite
from typing import Any

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import InvalidLimitError, StoreConfigError, TraceError
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import spec
from ratekeeper.simulate.trace import Trace
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.stores.wrappers.leasing import HORIZON, SHARE, TTL, Leasing, check_options

#: The most simulated instances.
MAX_INSTANCES = 1_000

#: How events are dealt to the instances.
ROUTE = "round robin"

#: The most windows a leased run's series holds; a longer one is merged.
MAX_WINDOWS = 100_000


@dataclass(frozen=True)
class LeaseOptions:
    """The options of every simulated instance's ``Leasing``: ``ttl`` (seconds a slice may be
    granted from), ``horizon`` (seconds of an instance's demand a slice is sized for) and
    ``share`` (the largest slice, as a share of the limit's capacity); see
    ``ratekeeper.stores.wrappers.leasing``. Raises ``TraceError`` for values it would refuse."""

    ttl: float = TTL
    horizon: float = HORIZON
    share: float = SHARE

    def __post_init__(self) -> None:
        try:
            check_options(self.ttl, self.horizon, self.share)
        except StoreConfigError as error:
            raise TraceError(str(error)) from None


def check_instances(instances: Any) -> int:
    """``instances`` if it is a whole number from 1 to ``MAX_INSTANCES``, else ``TraceError``."""
    if (
        isinstance(instances, bool)
        or not isinstance(instances, int)
        or not 1 <= instances <= MAX_INSTANCES
    ):
        raise TraceError(
            f"instances must be a whole number from 1 to {MAX_INSTANCES:,}, not {instances!r}"
        )
    return instances


def leased(limit: Limit) -> Limit:
    """``limit`` with ``sync="leased"``; ``InvalidLimitError`` saying why it cannot lease."""
    why = spec(limit.algorithm).no_lease
    if why:
        raise InvalidLimitError(f"{limit} cannot be leased: {why}")
    if limit.sync == "leased":
        return limit
    return Limit(
        limit.amount,
        limit.period,
        limit.algorithm,
        burst=limit.burst,
        granularity=limit.granularity,
        calendar=limit.calendar,
        partial=limit.partial,
        debt=limit.debt,
        sync="leased",
    )


@dataclass(frozen=True)
class LeaseMeasures:
    """One limit's leased run against its exact run.

    ``admitted`` and ``exact`` are units admitted; ``difference`` is ``admitted - exact`` and
    ``ratio`` ``admitted / exact`` (1 when both are 0). ``exchanges`` counts the leased run's
    round trips to its store (``returns`` of them only gave back), ``decisions`` the exact
    run's (one per hit). ``peak`` and ``exact_peak`` are the most units admitted in any window
    of the period's length, for any key. ``windows`` holds ``(seconds from the first event,
    exact units, leased units)`` per window of ``window`` seconds (the period, or a multiple of
    it for a long trace), counted from time 0.
    """

    limit: str
    algorithm: str
    amount: int
    capacity: int
    period: float
    admitted: int
    exact: int
    difference: int
    ratio: float
    exchanges: int
    returns: int
    decisions: int
    peak: int
    exact_peak: int
    window: float
    windows: list[tuple[float, int, int]] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["windows"] = [list(point) for point in self.windows]
        return data


@dataclass(frozen=True)
class Leases:
    """The leased runs of a simulation: how they were made, and ``measures`` per limit."""

    instances: int
    options: LeaseOptions
    measures: list[LeaseMeasures]
    route: str = ROUTE

    def to_dict(self) -> dict[str, Any]:
        return {
            "instances": self.instances,
            "route": self.route,
            **asdict(self.options),
            "limits": [measures.to_dict() for measures in self.measures],
        }


class _TraceClock:
    """The trace's time, as the stores and the wrappers read it."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = -inf

    def __call__(self) -> float:
        return self.now


class _Counted:
    """The shared store, counting the round trips made to it."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.trips = 0
        self.returns = 0  # exchanges that only gave back

    def lease(self, key: str, limit: Limit, want: int, **options: Any) -> Any:
        self.trips += 1
        if not want:
            self.returns += 1
        return self.store.lease(key, limit, want, **options)

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        self.trips += 1
        return self.store.apply(key, limit, cost, now)

    def close(self) -> None:
        self.store.close()


class _Admitted:
    """What one run admitted: units in all, per window, and the most in one period per key."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.units = 0
        self.peak = 0
        self.windows: dict[int, int] = {}
        self.recent: dict[str, tuple[deque[tuple[float, int]], list[int]]] = {}

    def add(self, key: str, now: float, units: int) -> None:
        self.units += units
        slot = int(now // self.period)
        self.windows[slot] = self.windows.get(slot, 0) + units
        found = self.recent.get(key)
        if found is None:
            found = self.recent[key] = (deque(), [0])
        times, held = found
        edge = now - self.period
        while times and times[0][0] <= edge:
            held[0] -= times.popleft()[1]
        times.append((now, units))
        held[0] += units
        if held[0] > self.peak:
            self.peak = held[0]


class LeaseRun:
    """One limit replayed exact on one store and leased over ``instances`` (see the module);
    ``feed`` it the trace's chunks in order, then ``measures``."""

    def __init__(self, limit: Limit, instances: int, options: LeaseOptions) -> None:
        self.limit = limit
        self.leased = leased(limit)
        self.options = options
        self.clock = clock = _TraceClock()
        self.exact_store = MemoryStore(clock=clock)
        self.shared = _Counted(MemoryStore(clock=clock))
        self.instances = [
            Leasing(
                self.shared,  # type: ignore[arg-type]  # a partial store: what a replay asks
                ttl=options.ttl,
                horizon=options.horizon,
                share=options.share,
                clock=clock,
                background=False,
            )
            for _ in range(instances)
        ]
        self.turn = 0
        self.due = inf  # when the next sweep is
        self.decisions = 0
        self.exact = _Admitted(limit.period)
        self.leases = _Admitted(limit.period)

    def feed(self, part: Trace) -> None:
        """Replay the events of ``part``, the next chunk of the trace (checked already)."""
        clock = self.clock
        ttl = self.options.ttl
        limit, leased_limit = self.limit, self.leased
        exact_apply = self.exact_store.apply
        instances = self.instances
        count = len(instances)
        turn = self.turn
        exact_add, leased_add = self.exact.add, self.leases.add
        costs = part.costs if part.costs is not None else repeat(1)
        for when, key, cost in zip(part.times, part.keys, costs, strict=False):
            now = when if when > clock.now else clock.now  # out of order: the latest seen
            if self.due == inf:
                self.due = now + ttl
            elif now >= self.due:
                self._sweep(now)
            clock.now = now
            granted = exact_apply(key, limit, cost)[6]
            if granted:
                exact_add(key, now, granted)
            granted = instances[turn].apply(key, leased_limit, cost)[6]
            if granted:
                leased_add(key, now, granted)
            turn += 1
            if turn == count:
                turn = 0
        self.turn = turn
        self.decisions += len(part.times)

    def _sweep(self, now: float) -> None:
        """Sweep every instance at the sweep due, and after a gap once more at the last sweep
        due before ``now``."""
        ttl = self.options.ttl
        due = self.due
        self._sweep_at(due)
        if now >= due + ttl:
            due += (now - due) // ttl * ttl
            self._sweep_at(due)
        self.due = due + ttl

    def _sweep_at(self, when: float) -> None:
        self.clock.now = when
        for instance in self.instances:
            instance.sweep()

    def measures(self, start: float) -> LeaseMeasures:
        """The numbers, with times in seconds from ``start`` (the first event's time)."""
        limit = self.limit
        exact, leases = self.exact, self.leases
        slots = [*exact.windows, *leases.windows]
        window = limit.period
        series: list[tuple[float, int, int]] = []
        if slots and isfinite(start):
            low, high = min(slots), max(slots)
            factor = -(-(high - low + 1) // MAX_WINDOWS)
            window *= factor
            merged: dict[int, list[int]] = {}
            for index, bins in enumerate((exact.windows, leases.windows)):
                for slot, units in bins.items():
                    merged.setdefault(slot // factor, [0, 0])[index] += units
            for slot in range(low // factor, high // factor + 1):
                exact_units, leased_units = merged.get(slot, (0, 0))
                series.append((slot * window - start, exact_units, leased_units))
        return LeaseMeasures(
            limit=str(limit),
            algorithm=limit.algorithm.value,
            amount=limit.amount,
            capacity=limit.capacity,
            period=limit.period,
            admitted=leases.units,
            exact=exact.units,
            difference=leases.units - exact.units,
            ratio=leases.units / exact.units if exact.units else 1.0,
            exchanges=self.shared.trips,
            returns=self.shared.returns,
            decisions=self.decisions,
            peak=leases.peak,
            exact_peak=exact.peak,
            window=window,
            windows=series,
        )


def runs(limits: Sequence[Limit], instances: Any, options: Any) -> list[LeaseRun]:
    """A ``LeaseRun`` per limit, checking ``instances`` and ``options`` first (``TraceError``)
    and that every limit can lease (``InvalidLimitError``)."""
    instances = check_instances(instances)
    if not isinstance(options, LeaseOptions):
        raise TraceError(f"leases must be LeaseOptions, not {options!r}")
    for limit in limits:
        leased(limit)
    return [LeaseRun(limit, instances, options) for limit in limits]
