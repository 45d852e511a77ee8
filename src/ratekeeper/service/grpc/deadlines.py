"""The deadlines of the gRPC calls in flight on one event loop, under one timer of the loop's.

A call's ``grpc-timeout`` bounds it as grpc.aio bounds it: past its deadline the call is
cancelled, and answered ``DEADLINE_EXCEEDED`` (``asgi.GrpcApp``). An asyncio timeout a call
(``asyncio.timeout``) puts a timer on the loop's heap and takes it off again: a few
microseconds on every call, as much as the decision costs. A gateway sends every call with a
timeout (Envoy's rate-limit filter: 20 ms unless configured), and nearly every call ends long
before it. So ``Deadlines`` keeps the calls' deadlines in a heap of its own, under one loop
timer armed for the earliest deadline not yet passed: a call pushes its deadline and marks it
ended, and while calls end in time the timer fires about once a timeout, not once a call. Ended
calls leave the heap when the timer fires, or all at once when they outnumber the calls still
running, so that a long timeout does not keep them.
"""

from __future__ import annotations

import asyncio
import itertools
from heapq import heapify, heappop, heappush
from math import inf

#: Ended calls the heap may hold beyond twice those running, before it is rebuilt without them.
SLACK = 1024


class Deadline:
    """One call's deadline (``loop.time()``): ``expired`` once it passed with the call running,
    its ``task`` then cancelled (``cancelling``: the task's cancellations before, for the call
    to tell its deadline's cancellation from another, as ``asyncio.timeout`` does)."""

    __slots__ = ("cancelling", "ended", "expired", "task", "when")

    def __init__(self, when: float, task: asyncio.Task[object]) -> None:
        self.when = when
        self.task = task
        self.cancelling = task.cancelling()
        self.ended = False
        self.expired = False


class Deadlines:
    """The deadlines of the calls under way on the running loop (see the module).

    ``start(seconds)`` gives the current task's call a deadline ``seconds`` from now; the call
    gives it to ``end`` once it has its answer, whatever happened. If the deadline passes first,
    its ``expired`` is set and the task cancelled.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()  # ties in order of arrival
        self._running = 0
        self._timer: asyncio.TimerHandle | None = None
        self._armed = inf  # when the timer fires

    def start(self, seconds: float) -> Deadline:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop: the old one's calls are no more
            self._loop, self._heap, self._running, self._timer, self._armed = loop, [], 0, None, inf
        task = asyncio.current_task(loop)
        assert task is not None, "a call runs in a task"
        deadline = Deadline(loop.time() + seconds, task)
        heappush(self._heap, (deadline.when, next(self._order), deadline))
        self._running += 1
        if deadline.when < self._armed:
            self._arm(loop, deadline.when)
        return deadline

    def end(self, deadline: Deadline) -> None:
        if deadline.ended:
            return
        deadline.ended = True
        self._running -= 1
        heap = self._heap
        if len(heap) > 2 * self._running + SLACK:
            self._heap = [one for one in heap if not one[2].ended]
            heapify(self._heap)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = when
        self._timer = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        """Expire the calls whose deadline has passed; arm the timer for the next."""
        self._timer, self._armed = None, inf
        loop, heap = self._loop, self._heap
        assert loop is not None
        now = loop.time()
        while heap and (heap[0][2].ended or heap[0][0] <= now):
            deadline = heappop(heap)[2]
            if not deadline.ended:
                deadline.expired = True
                deadline.task.cancel()
        if heap:
            self._arm(loop, heap[0][0])
