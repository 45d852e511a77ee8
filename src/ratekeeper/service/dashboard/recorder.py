"""What the dashboard shows, recorded as the service decides, in bounded memory.

A ``Recorder`` is the engine's observer in front of the one it had (the metrics). For each
decision it adds one to the key's pending counts: its decisions, and its refusals (limited, or
let through by shadow mode), and keeps the decision with the time it was recorded (the wall
clock, read once a decision). That is the only work on a decision's path: a clock, a lock and
a dict. The rest happens in ``tick()``, which the service runs once a second:

- the pending counts are folded into the current slot of ``SLOT`` seconds: two summaries of at
  most ``capacity`` keys each (``ratekeeper.core.frequent``), the keys with the most decisions
  and the keys with the most refusals. Pending counts are folded early when ``4 * capacity``
  distinct keys are waiting, so memory is bounded whatever the number of keys;
- the decisions by domain, rule and result, and the latency histogram of each surface, are
  read from the metrics and kept as what changed in the second just ended;
- what is older than ``HISTORY`` seconds is dropped; as each slot begins, so is the latest
  decision of every key that no summary holds any more.

``shot()`` is this process's record as a ``Shot``; ``ratekeeper.service.dashboard.stats``
reads any number of them (one per worker process) as one service. With many workers each
publishes its own into files (``ratekeeper.service.dashboard.shared``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ratekeeper.core.frequent import Summary
from ratekeeper.rules.model import UNITS
from ratekeeper.service.observe.labels import rule_label

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine, Engine, Status
    from ratekeeper.service.observe.metrics import Metrics

#: Seconds of one slot of the keys' summaries: a window is a whole number of them.
SLOT = 10
#: Seconds of history kept: the longest window asked of the keys, and of the rates.
HISTORY = 300
#: Keys each summary keeps; each count is then at most total / (CAPACITY + 1) below the truth.
CAPACITY = 1000
#: Keys of each slot whose latest decision is kept with it, to show their rule and limit.
SHOWN = 100

#: A key's latest decision as the dashboard shows it: its rule, limit and algorithm (None
#: when no limit applied), the hits remaining, whether it was allowed, and when the process
#: recorded it (the wall clock, ``time.time()``): of one key's decisions in several
#: processes, the one recorded last is the newest.
Latest = tuple[str, str | None, str | None, int, bool, float]
#: Decisions in one second, by (domain, rule, result).
Counts = dict[tuple[str, str, str], int]


@dataclass(slots=True)
class Slot:
    """``SLOT`` seconds of keys: the most decided and the most refused."""

    requests: Summary
    refused: Summary


@dataclass(slots=True)
class Shot:
    """One process's record (see the module): ``seconds`` and ``latency`` are what changed in
    each second, oldest first (the latency as counts per bucket of the metrics' histogram, by
    surface); ``slots`` by their first second; ``latest`` the latest decision of the keys
    shown; ``health`` the request store's, as the metrics last found it (None if unknown);
    ``started`` when the process began to record."""

    pid: int
    at: float
    seconds: list[tuple[int, Counts]]
    latency: list[tuple[int, dict[str, list[int]]]]
    slots: dict[int, Slot]
    latest: Mapping[str, Latest]
    health: dict[str, Any] | None = None
    live: bool = True
    started: float = 0.0


class Recorder:
    """The dashboard's record of the decisions of ``engine``, beside its ``metrics`` (see the
    module); made, it becomes ``engine``'s observer, passing every decision on to the observer
    it had. ``clock`` is the wall clock (``time.time``)."""

    def __init__(
        self,
        engine: Engine | AsyncEngine,
        metrics: Metrics,
        *,
        capacity: int = CAPACITY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.metrics = metrics
        self.capacity = capacity
        self._empty = Summary(capacity)  # checks the capacity
        self._room = 4 * capacity
        self._clock = clock
        self.started = clock()
        self._lock = threading.Lock()
        # key: [decisions, refusals, latest status, when it was recorded]
        self._pending: dict[str, list[Any]] = {}
        self._slots: dict[int, Slot] = {}
        # the latest decision of each key in a slot, and when it was recorded
        self._statuses: dict[str, tuple[Status, float]] = {}
        self._turned = 0  # the slot of the last tick (its first second // SLOT)
        self._seconds: deque[tuple[int, Counts]] = deque()
        self._latency: deque[tuple[int, dict[str, list[int]]]] = deque()
        self._counted = metrics.decisions()
        self._timed = metrics.latency_counts()
        self._default = engine.planner.default
        self._next = engine.observer
        engine.observer = self._observe

    def _observe(self, domain: str, statuses: tuple[Status, ...]) -> None:
        observer = self._next
        if observer is not None:
            observer(domain, statuses)
        at = self._clock()
        with self._lock:
            pending = self._pending
            for status in statuses:
                if status[1] is None:  # nothing counted: no limit applied
                    continue
                refused = 0 if status[0] and not status[5] else 1
                entry = pending.get(status[6])
                if entry is not None:
                    entry[0] += 1
                    entry[1] += refused
                    entry[2] = status
                    entry[3] = at
                    continue
                if len(pending) >= self._room:
                    self._fold(at)
                    pending = self._pending
                pending[status[6]] = [1, refused, status, at]

    def _fold(self, now: float) -> None:
        """The pending counts into the slot of ``now`` (lock held)."""
        pending = self._pending
        if not pending:
            return
        self._pending = {}
        start = int(now // SLOT * SLOT)
        slot = self._slots.get(start)
        if slot is None:
            slot = self._slots[start] = Slot(self._empty, self._empty)
        slot.requests = slot.requests.merged((), {key: one[0] for key, one in pending.items()})
        refused = {key: one[1] for key, one in pending.items() if one[1]}
        if refused:
            slot.refused = slot.refused.merged((), refused)
        statuses = self._statuses
        kept, refusing = slot.requests.counts, slot.refused.counts
        for key, one in pending.items():
            if key in kept or key in refusing:
                statuses[key] = (one[2], one[3])

    def tick(self, now: float | None = None) -> None:
        """Once a second, just after it turns: fold the pending counts, note what the metrics
        counted in the second just ended, and drop what is older than ``HISTORY``."""
        now = self._clock() if now is None else now
        second = int(now) - 1
        counted = self.metrics.decisions()
        before = self._counted
        changed = {
            key: n - before.get(key, 0) for key, n in counted.items() if n != before.get(key, 0)
        }
        self._counted = counted
        timed = self.metrics.latency_counts()
        earlier = self._timed
        latency = {
            surface: [n - was for n, was in zip(counts, earlier[surface], strict=True)]
            for surface, counts in timed.items()
            if counts != earlier[surface]
        }
        self._timed = timed
        with self._lock:
            self._fold(now)
            if changed:
                self._seconds.append((second, changed))
            if latency:
                self._latency.append((second, latency))
            oldest = second - HISTORY
            for kept in (self._seconds, self._latency):
                while kept and kept[0][0] <= oldest:
                    kept.popleft()
            for start in [start for start in self._slots if start + SLOT <= now - HISTORY]:
                del self._slots[start]
            current = int(now // SLOT)
            if current != self._turned:  # a new slot: forget the keys the summaries dropped
                self._turned = current
                self._forget()

    def _forget(self) -> None:
        """Keep the latest decision only of the keys still in a slot (lock held)."""
        kept: set[str] = set()
        for slot in self._slots.values():
            kept.update(slot.requests.counts)
            kept.update(slot.refused.counts)
        self._statuses = {key: status for key, status in self._statuses.items() if key in kept}

    def shot(self, now: float | None = None) -> Shot:
        """This process's record as it is now, the pending counts folded in."""
        now = self._clock() if now is None else now
        with self._lock:
            self._fold(now)
            slots = {start: Slot(one.requests, one.refused) for start, one in self._slots.items()}
            return Shot(
                os.getpid(),
                now,
                list(self._seconds),
                list(self._latency),
                slots,
                _Latest(dict(self._statuses), self._default),
                started=self.started,
            )


class _Latest(Mapping[str, Latest]):
    """The latest decision of the keys in a ``Shot`` of this process, made as they are asked."""

    def __init__(self, statuses: dict[str, tuple[Status, float]], default: object) -> None:
        self._statuses = statuses
        self._default = default

    def __getitem__(self, key: str) -> Latest:
        status, at = self._statuses[key]
        return latest_of(status, self._default, at)

    def __iter__(self) -> Iterator[str]:
        return iter(self._statuses)

    def __len__(self) -> int:
        return len(self._statuses)


def latest_of(status: Status, default: object, at: float) -> Latest:
    """How the dashboard shows the decision ``status``, recorded at ``at``."""
    limit = status.limit
    decision = status.decision
    remaining = 0 if decision is None else decision.remaining
    if limit is None:
        return (rule_label(status, default), None, None, remaining, status.allowed, at)
    return (
        rule_label(status, default),
        rate_text(limit.amount, limit.period),
        limit.algorithm.value,
        remaining,
        status.allowed,
        at,
    )


def rate_text(amount: int, period: float) -> str:
    """``100/minute`` for 100 per 60 seconds; ``5/90s`` where no unit fits."""
    for name, seconds in UNITS.items():
        if period == seconds:
            return f"{amount}/{name}"
    return f"{amount}/{period:g}s"
