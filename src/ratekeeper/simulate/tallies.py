"""What one limit decides of a replay, key by key: the tallies and the loops that fill them.

Each event is decided by the limit's own ``step``, as a store decides it: the state is threaded
through per key exactly as ``MemoryStore.apply`` keeps it (a hit of cost 0 writes nothing), and
``now`` is the event's time. No clock is read, nothing sleeps.

Every decision is also judged against the exact reference, a sliding log of the same amount
and period, applied to the history the limit itself made: a hit of cost ``c`` at ``t`` *fits*
iff the units the limit admitted in ``(t - period, t]`` plus ``c`` are at most the amount. An
admitted hit that does not fit is a *false allow*; a refused hit that fits, a *false
refusal*. The sliding log itself therefore makes neither.

The leaky-bucket shaper promises two things: its hits proceed no faster than the rate, and its
queue holds at most ``burst`` units of work (a hit waits at most ``burst x period / amount``).
Its reference is a sliding log behind a FIFO of that bound, on its own history: ``t`` is the
time a hit proceeds (refused, the time it would have proceeded: when the last admitted hit's
work is done, or now if that is past), and a refused hit the queue could not have held (that
wait plus its own work past the bound) is counted apart, in ``full_queue``: refusing it is the
shaper's design, not an error. Only a refusal with room in the queue and in the log is false.

Each key's events run through one tight loop (``replay_key``) with its state in local
variables: the fast path. For each key the history of admitted units is kept as their sorted
times, one entry per unit, with a pointer to the first one still inside the window; entries
more than two periods behind the latest judged time are dropped (into the time series), so a
key's memory is bounded by what it admits in two periods. The common case, hits of cost 1
with nothing recorded and no retries, takes a leaner loop (``replay_units``) over the same
history.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from heapq import heappush
from itertools import count, repeat
from math import inf
from typing import Any

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.leaky_shaper import EPSILON
from ratekeeper.core.limits import Limit
from ratekeeper.simulate.trace import RETRY_AFTER, Retry

#: Slack on the shaper's window edge, relative to the period: its departures lie on a float
#: grid of ``period / amount``, and a departure exactly one period before another must not be
#: counted in through rounding.
SLACK = 1e-9

#: Trim a key's history once this many entries have left its window.
TRIM = 4_096

#: A retry waiting to be replayed: (time, sequence, cost, attempt).
Pending = tuple[float, int, int, int]


class KeyTally:
    """One key under one limit: its algorithm state and what it has admitted."""

    __slots__ = (
        "admitted",
        "free",
        "lo",
        "peak",
        "pending",
        "reach",
        "requested",
        "state",
        "times",
        "trim_at",
    )

    def __init__(self) -> None:
        self.state: Any = None
        self.times: list[float] = []  # the times of admitted units, sorted, one per unit
        self.lo = 0  # the first entry of ``times`` inside the window of ``reach``
        self.reach = -inf  # the latest time judged
        self.trim_at = TRIM
        self.requested = 0  # units, retries included
        self.admitted = 0  # units (set at the end of each run)
        self.peak = 0  # the most units admitted in one window of the period's length
        self.pending: list[Pending] = []  # retries not replayed yet
        self.free = -inf  # the shaper: when the last admitted hit's work is done


class LimitTally:
    """What one limit decided over the whole replay, summed over its keys."""

    def __init__(self, limit: Limit, width: float, retry: Retry | None, record: bool) -> None:
        self.limit = limit
        self.shaper = limit.algorithm is Algorithm.LEAKY_SHAPER
        #: The shaper's slack on its window edge, and the most work its queue holds.
        self.slack = limit.period * SLACK if self.shaper else 0.0
        self.bound = limit.capacity * limit.interval * (1 + EPSILON)
        self.retry = retry
        self.keys: dict[str, KeyTally] = {}
        self.requests = 0  # hits of the trace decided (retries are counted apart)
        self.retries = 0
        self.admitted = 0  # hits admitted
        self.false_allows = 0
        self.false_refusals = 0
        self.full_queue = 0  # the shaper's refusals of hits its queue could not hold
        self.delays = array("d")  # the delays of admitted hits that had to wait
        self.width = width
        self.inverse = 1.0 / width
        self.series: dict[int, int] = {}  # time bin -> admitted units
        #: time bin -> the most units one key held in one period ending at a unit it admitted
        #: in the bin: what the limit promises to keep at its amount
        self.fullest: dict[int, int] = {}
        #: ``fullest`` in the finer bins of a close-up of the attack (``Replay.zoom``)
        self.zoom: dict[int, int] = {}
        self.sequence = count()
        #: With ``record``: 1 per allowed event of the trace (retries are not recorded), and
        #: each allowed event's delay.
        self.decisions: bytearray | None = bytearray() if record else None
        self.delay_of: array[float] | None = array("d") if record else None

    def add(self, admitted: int, false_allows: int, false_refusals: int, full_queue: int) -> None:
        """Add what one run of a key's events decided."""
        self.admitted += admitted
        self.false_allows += false_allows
        self.false_refusals += false_refusals
        self.full_queue += full_queue


def replay_key(tally: LimitTally, key: KeyTally, events: Iterable[tuple[float, int, int]]) -> None:
    """Decide ``events`` of one key, ``(time, cost, tag)`` in time order, where ``tag`` is the
    event's position in the trace or, for a retry, minus its attempt."""
    limit = tally.limit
    step, amount, period, interval = limit.step, limit.amount, limit.period, limit.interval
    shaper, slack, bound = tally.shaper, tally.slack, tally.bound
    free, state, times = key.free, key.state, key.times
    append, extend = times.append, times.extend
    lo, reach, trim_at = key.lo, key.reach, key.trim_at
    size = len(times)
    last = times[-1] if times else -inf
    peak, admitted_units = key.peak, key.admitted
    admitted = false_allows = false_refusals = full_queue = 0
    delays, decisions, delay_of = tally.delays, tally.decisions, tally.delay_of
    retry, fullest = tally.retry, tally.fullest
    # The bin of the last unit admitted, its bounds in seconds, and the most held in it.
    slot, low, high, most = 0, inf, -inf, 0
    for now, cost, tag in events:
        new, decision = step(state, now, cost, limit)
        allowed = decision[0]
        # The shaper's hits are judged when they proceed, or would have: its queue's work done.
        at = (now + decision[5] if allowed else free if free > now else now) if shaper else now
        edge = at - period + slack
        if at >= reach:
            reach = at
            while lo < size and times[lo] <= edge:
                lo += 1
            held = size - lo
        else:  # behind a time judged already: out of order
            held = bisect_right(times, at) - bisect_right(times, edge)
        if allowed:
            admitted += 1
            if cost:
                state = new
            if held + cost > amount:
                false_allows += 1
            granted = decision[6]
            if granted:
                if at < last:
                    at = last  # the history stays sorted
                last = at
                if granted == 1:
                    append(at)
                else:
                    extend(repeat(at, granted))
                size += granted
                admitted_units += granted
                if shaper:
                    free = at + granted * interval
                held += granted
                if held > peak:
                    peak = held
                if not low <= at < high:
                    slot, low, high = _enter_bin(tally, slot, most, at)
                    most = 0
                if held > most:
                    most = held
            delay = decision[5]
            if delay:
                delays.append(delay)
            if decisions is not None and tag >= 0:
                decisions[tag] = 1
                if delay and delay_of is not None:
                    delay_of[tag] = delay
        else:
            if shaper and at - now + cost * interval > bound:
                full_queue += 1  # more than its queue holds: the shaper's bound, by design
            elif held + cost <= amount:
                false_refusals += 1
            if retry is not None:
                _retry(tally, key, retry, decision[4], now, cost, tag)
        if lo >= trim_at:
            lo, size, trim_at = _trim(tally, times, lo, reach)
    _leave_bin(fullest, slot, most)
    key.state = state
    key.lo, key.reach, key.trim_at = lo, reach, trim_at
    key.peak, key.admitted, key.free = peak, admitted_units, free
    tally.add(admitted, false_allows, false_refusals, full_queue)


def _retry(  # noqa: PLR0917 - positional: one call per refusal of a retry storm
    tally: LimitTally,
    key: KeyTally,
    retry: Retry,
    retry_after: float,
    now: float,
    cost: int,
    tag: int,
) -> None:
    """Schedule in ``key.pending`` the retry of a hit refused at ``now`` (``tag`` below 0 for a
    retry itself: minus its attempt), unless it has had its attempts or would wait for ever."""
    attempt = -tag if tag < 0 else 0
    if attempt < retry.max_retries:
        wait = retry_after + retry.gap if retry.after == RETRY_AFTER else retry.gap
        if wait < inf:
            heappush(key.pending, (now + wait, next(tally.sequence), cost, attempt + 1))
            tally.retries += 1
            key.requested += cost


def replay_units(tally: LimitTally, key: KeyTally, events: Sequence[float]) -> None:
    """``replay_key`` for the common case, on its fast path: hits of cost 1 at ``events``
    (their times, in order), no retries, nothing recorded, any algorithm but the shaper."""
    limit = tally.limit
    step = limit.step
    amount = limit.amount
    period = limit.period
    state = key.state
    times = key.times
    append = times.append
    lo, reach, trim_at = key.lo, key.reach, key.trim_at
    size = len(times)
    peak = key.peak
    false_allows = false_refusals = 0
    before = size
    fullest = tally.fullest
    # The bin of the last unit admitted, its bounds in seconds, and the most held in it.
    slot, low, high, most = 0, inf, -inf, 0
    for now in events:
        new, decision = step(state, now, 1, limit)
        at = now
        if now >= reach:
            reach = now
            edge = now - period
            while lo < size and times[lo] <= edge:
                lo += 1
            held = size - lo
        else:  # out of order: judged as in ``replay_key``
            held = bisect_right(times, now) - bisect_right(times, now - period)
            if times and now < times[-1]:
                at = times[-1]  # the history stays sorted
        if decision[0]:
            state = new
            if held >= amount:
                false_allows += 1
            append(at)
            size += 1
            if held >= peak:
                peak = held + 1
            if not low <= at < high:
                slot, low, high = _enter_bin(tally, slot, most, at)
                most = 0
            if held >= most:
                most = held + 1
        elif held < amount:
            false_refusals += 1
        if lo >= trim_at:
            before -= lo
            lo, size, trim_at = _trim(tally, times, lo, reach)
            before += lo
    _leave_bin(fullest, slot, most)
    admitted = size - before
    key.state = state
    key.lo, key.reach, key.trim_at = lo, reach, trim_at
    key.peak = peak
    key.admitted += admitted
    tally.add(admitted, false_allows, false_refusals, 0)


def _enter_bin(tally: LimitTally, slot: int, most: int, at: float) -> tuple[int, float, float]:
    """Leave the time bin ``slot`` (see ``_leave_bin``) for the bin of ``at``: its number and
    bounds in seconds."""
    _leave_bin(tally.fullest, slot, most)
    slot = int(at * tally.inverse)
    low = slot * tally.width
    return slot, low, low + tally.width


def _leave_bin(fullest: dict[int, int], slot: int, most: int) -> None:
    """Keep ``most``, the most units a key held in one period ending in the time bin ``slot``,
    in ``fullest`` if no key held more."""
    if most > fullest.get(slot, 0):
        fullest[slot] = most


def _trim(tally: LimitTally, times: list[float], lo: int, reach: float) -> tuple[int, int, int]:
    """Drop the entries of ``times`` more than two periods behind ``reach``, the latest time
    judged, into the time series; return the new ``lo``, size and next trimming point."""
    cut = bisect_right(times, reach - 2 * tally.limit.period, 0, lo)
    bin_admitted(tally, times, cut)
    del times[:cut]
    lo -= cut
    return lo, len(times), lo + max(TRIM, len(times))


def bin_admitted(tally: LimitTally, times: list[float], stop: int) -> None:
    """Add the units admitted at ``times[:stop]`` (one entry each) to the time series."""
    if not stop:
        return
    series = tally.series
    for slot, found in Counter(map(int, map(tally.inverse.__mul__, times[:stop]))).items():
        series[slot] = series.get(slot, 0) + found
