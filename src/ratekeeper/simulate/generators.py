"""Trace generators: each returns a ``Trace``, the same for the same arguments and ``seed``.

Times start at ``start`` (default ``START``, an epoch-sized instant on a whole day, so that
windows of any usual period are aligned to it) and are in seconds. Every hit costs 1. A trace
is held in memory, so a generator refuses, with ``TraceError``, arguments that would make more
than about ``MAX_EVENTS`` events, as it refuses any that are not positive finite numbers (or
whole numbers, for counts).

Every argument has a default, so that ``generator()`` (and ``ratekeeper simulate --generate
NAME``) makes a trace worth replaying through the default limits, 100 per minute: the standard
scenarios of docs/accuracy.md (``poisson``: 2.5/s for 20 minutes, 1.5 times the limit;
``bursts``: 10/s for 20 s of every 120 s for an hour; ``window_edge``: 100 either side of a
minute boundary; ``diurnal``: up to 4/s over two hours; ``zipf``: 1,000 keys at 50/s for ten
minutes; ``retry_storm``: 3/s for ten minutes).
"""

from __future__ import annotations

import random
from bisect import bisect_right
from itertools import accumulate
from math import ceil, cos, isfinite, pi, ulp

from ratekeeper.core.errors import InvalidInputError, TraceError
from ratekeeper.core.inputs import check_key
from ratekeeper.core.periods import spoken
from ratekeeper.core.wording import many
from ratekeeper.simulate.trace import IMMEDIATELY, RETRY_AFTER, Retry, Trace

#: 2023-11-15 00:00:00 UTC: on a whole day, hour and minute.
START = 1_700_006_400.0

#: The most events (or keys) a generator makes; the random ones, about as many.
MAX_EVENTS = 100_000_000


def _number(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not isfinite(value):
        raise TraceError(f"{name} must be a finite number, not {value!r}")


def _positive(**values: float) -> None:
    for name, value in values.items():
        _number(name, value)
        if not value > 0:
            raise TraceError(f"{name} must be positive, not {value!r}")


def _count(name: str, value: int, most: int = MAX_EVENTS) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= most:
        raise TraceError(f"{name} must be a whole number from 1 to {most:,}, not {value!r}")


def _key(key: str) -> None:
    try:
        check_key(key)
    except InvalidInputError as error:
        raise TraceError(str(error)) from None


def _events(rate: float, seconds: float) -> None:
    """Refuse ``rate`` hits per second for ``seconds`` if it makes too many events."""
    if rate * seconds > MAX_EVENTS:
        raise TraceError(
            f"{rate:g}/s for {seconds:g} s makes about {rate * seconds:,.0f} events; "
            f"at most {MAX_EVENTS:,}"
        )


def _arrivals(rng: random.Random, rate: float, start: float, end: float) -> list[float]:
    """Poisson arrivals at ``rate`` per second in ``[start, end)``."""
    if 1 / rate < ulp(max(abs(start), abs(end))):
        raise TraceError(f"{rate:g}/s is finer than times near {end:g} s can tell apart")
    times: list[float] = []
    append, draw = times.append, rng.expovariate
    now = start + draw(rate)
    while now < end:
        append(now)
        now += draw(rate)
    return times


def poisson(
    rate: float = 2.5,
    seconds: float = 1_200,
    *,
    key: str = "client",
    seed: int = 0,
    start: float = START,
) -> Trace:
    """Steady Poisson arrivals on one key: ``rate`` hits per second for ``seconds``."""
    _positive(rate=rate, seconds=seconds)
    _events(rate, seconds)
    _number("start", start)
    _key(key)
    times = _arrivals(random.Random(seed), rate, start, start + seconds)
    return Trace(times, [key] * len(times), name=f"poisson {rate:g}/s")


def bursts(
    rate: float = 10,
    on: float = 20,
    off: float = 100,
    seconds: float = 3_600,
    *,
    key: str = "client",
    seed: int = 0,
    start: float = START,
) -> Trace:
    """On/off bursts on one key: Poisson at ``rate`` per second for ``on`` seconds, then
    silence for ``off`` seconds, over and over for ``seconds``."""
    _positive(rate=rate, on=on, seconds=seconds)
    _number("off", off)
    if off < 0:
        raise TraceError(f"off must be >= 0, not {off!r}")
    _events(rate, seconds)
    _number("start", start)
    _key(key)
    cycles = ceil(seconds / (on + off))
    if cycles > MAX_EVENTS:
        raise TraceError(
            f"{seconds:g} s makes {cycles:,} cycles of on and off; at most {MAX_EVENTS:,}"
        )
    rng = random.Random(seed)
    times: list[float] = []
    marks: list[tuple[float, float]] = []
    end = start + seconds
    for cycle in range(cycles):
        begin = start + cycle * (on + off)
        if begin >= end:
            break
        times.extend(_arrivals(rng, rate, begin, min(begin + on, end)))
        marks.append((begin, min(begin + on, end)))
    return Trace(
        times,
        [key] * len(times),
        name=f"bursts {rate:g}/s {on:g}s on {off:g}s off",
        marks=tuple(marks),
    )


def window_edge(
    amount: int = 100,
    period: float = 60,
    *,
    key: str = "client",
    spread: float = 0.01,
    start: float = START,
) -> Trace:
    """The window-edge attack: ``amount`` hits in the last ``spread`` of a period before a
    window boundary and ``amount`` in the first ``spread`` after it (``spread`` is a share of
    the period). The boundary is the first multiple of ``period`` one period after ``start``."""
    _count("amount", amount, MAX_EVENTS // 2)
    _positive(period=period, spread=spread)
    _number("start", start)
    _key(key)
    boundary = start - start % period + 2 * period
    span = spread * period
    step = span / amount
    before = [boundary - span + i * step for i in range(amount)]
    after = [boundary + i * step for i in range(amount)]
    times = before + after
    return Trace(
        times,
        [key] * len(times),
        name=f"window edge {amount}/{spoken(period)}",
        marks=((boundary - span, boundary + span),),
    )


def diurnal(
    peak: float = 4,
    seconds: float = 7_200,
    *,
    low: float = 0.1,
    day: float | None = None,
    key: str = "client",
    seed: int = 0,
    start: float = START,
) -> Trace:
    """A diurnal ramp on one key: Poisson arrivals whose rate rises from ``low x peak`` to
    ``peak`` hits per second and back, one cycle per ``day`` seconds (default: the whole
    trace)."""
    _positive(peak=peak, seconds=seconds)
    _number("low", low)
    if not 0 <= low <= 1:
        raise TraceError(f"low must be a share from 0 to 1, not {low!r}")
    if day is not None:
        _positive(day=day)
    _events(peak, seconds)
    _number("start", start)
    _key(key)
    cycle = day if day is not None else seconds
    rng = random.Random(seed)
    # Thinning: candidates at the peak rate, each kept with the rate's share of the peak.
    times = [
        now
        for now in _arrivals(rng, peak, start, start + seconds)
        if rng.random() < low + (1 - low) * (1 - cos(2 * pi * (now - start) / cycle)) / 2
    ]
    return Trace(times, [key] * len(times), name=f"diurnal up to {peak:g}/s")


def zipf(
    keys: int = 1_000,
    rate: float = 50,
    seconds: float = 600,
    *,
    exponent: float = 1.1,
    seed: int = 0,
    start: float = START,
) -> Trace:
    """Many keys with Zipf popularity: Poisson arrivals at ``rate`` per second in all, each on
    key ``k<i>`` (``i`` from 1 to ``keys``) with probability proportional to
    ``1 / i**exponent``."""
    _count("keys", keys)
    _positive(rate=rate, seconds=seconds, exponent=exponent)
    _events(rate, seconds)
    _number("start", start)
    rng = random.Random(seed)
    times = _arrivals(rng, rate, start, start + seconds)
    weights = list(accumulate(1 / rank**exponent for rank in range(1, keys + 1)))
    total = weights[-1]
    names = [f"k{rank}" for rank in range(1, keys + 1)]
    draw = rng.random
    chosen = [names[bisect_right(weights, draw() * total)] for _ in times]
    return Trace(times, chosen, name=f"zipf {many(keys, 'key')} {rate:g}/s")


def retry_storm(
    rate: float = 3,
    seconds: float = 600,
    *,
    after: str = RETRY_AFTER,
    gap: float = 0.0,
    max_retries: int = 10,
    key: str = "api",
    seed: int = 0,
    start: float = START,
) -> Trace:
    """A retry storm: Poisson arrivals at ``rate`` per second on one shared key, whose refused
    clients come back, ``after="retry_after"`` when the refusal's ``Retry-After`` has passed
    (plus ``gap``), or ``after="immediately"`` ``gap`` seconds later (default 0.01), up to
    ``max_retries`` times each."""
    if after == IMMEDIATELY and not gap:
        gap = 0.01
    retry = Retry(after, gap, max_retries)
    trace = poisson(rate, seconds, key=key, seed=seed, start=start)
    return Trace(
        trace.times, trace.keys, name=f"retry storm {rate:g}/s, retry {after}", retry=retry
    )
