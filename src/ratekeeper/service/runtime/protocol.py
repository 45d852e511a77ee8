"""uvicorn's HTTP protocol (httptools), answering at the door, from the bytes a request came in,
while the process sheds: a decision turned away with ``503 overloaded``, a probe from its copy
(``ratekeeper.service.http.shed``, ``ratekeeper.service.http.copies``).

A request the app turns away costs a process about as much as the cheapest answer uvicorn can
give: parsing, a task, the ASGI calls. Under five thousand busy connections that alone keeps
one process's loop a quarter of a second behind, and a probe waits as long as the crowd for
each turn of the loop it needs. ``ShedFirst`` answers such a request in a few microseconds
instead, before any of that, when the bytes are one whole request on a connection with
nothing else under way and it is a decision the in-flight bound turns away
(``ShedFirst.bound``, set as the runtime builds the app) or, while the process sheds, a probe
with a fresh copy (``ShedFirst.copies``). The door weighs decisions while the process sheds,
and in a turn of the loop that has read ``BURST`` requests already: past its first ``BURST``
reads, the first turn of a burst lets no more than the bound through, the rest turned away
at once rather than after the app has parsed them. A request the door lets through carries
``shed.PREPAID`` in its scope, so that the app does not count it against the share again.
Otherwise it is uvicorn's own protocol, unchanged.

uvicorn takes it as its ``http`` protocol class; it needs httptools, which the ``server``
extra installs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from ratekeeper.service.http.app import overloaded
from ratekeeper.service.http.responses import problem_raw
from ratekeeper.service.http.shed import PREPAID, Request, answer, read, surface_of
from ratekeeper.service.inflight import RETRY_AFTER

if TYPE_CHECKING:
    from ratekeeper.service.http.copies import ProbeCopies
    from ratekeeper.service.inflight import InFlightBound

_RETRY = (b"retry-after", str(RETRY_AFTER).encode())
#: Reads in one turn of the loop past which the door weighs every decision, shedding or not:
#: past them, a burst's first turn lets no more than the in-flight bound through the door.
BURST = 256


class Turn:
    """What the door counts over one turn of the loop, on every connection, and the last 503
    it made: kept on an object of its own, since writing a class's attributes on every read
    would slow every lookup on its instances (CPython's caches of a type's attributes are
    reset by each write)."""

    __slots__ = ("answered", "loop", "owed", "reads", "unweighed")

    def __init__(self) -> None:
        self.loop: object = None  # the loop the reads are counted on
        self.reads = 0  # the reads of this turn
        #: The reads of this turn that went the usual way unweighed: on their way in, maybe
        #: as decisions, which the door counts toward the bound before letting one through.
        self.unweighed = 0
        self.owed: list[tuple[ShedFirst, bytes, bool]] = []  # answers for the next turn
        self.answered: tuple[object, str, bytes] = (None, "", b"")  # defaults, reason, 503

    def next(self) -> None:
        """A new turn of the loop: nothing read in it yet."""
        self.reads = self.unweighed = 0


class ShedFirst(HttpToolsProtocol):
    """uvicorn's ``HttpToolsProtocol``, shedding first (see the module)."""

    #: The in-flight bound of the app this process serves; None: nothing is shed here.
    bound: ClassVar[InFlightBound | None] = None
    #: The probes' answers kept while it sheds (``http.copies``); None: probes go the usual way.
    copies: ClassVar[ProbeCopies | None] = None
    _held: bytes | None = None  # while an answer is owed: what came after it
    _active = 0.0  # when a request was last answered at the door (the loop's time)
    #: What the door counts over the loop's turn (one loop serves a process).
    turn: ClassVar[Turn] = Turn()

    def data_received(self, data: bytes) -> None:
        if self._held is not None:  # an answer is owed on this connection: this comes after
            self._held += data
            return
        loop, turn = self.loop, ShedFirst.turn
        if turn.loop is not loop:  # a loop of its own (tests serve again)
            turn.loop = loop
            turn.reads = turn.unweighed = 0
        read_now = turn.reads
        turn.reads = read_now + 1
        if not read_now:  # the first read of this turn of the loop
            loop.call_soon(turn.next)
        bound = ShedFirst.bound
        if bound is not None and (read_now >= BURST or bound.shedding) and self._door(bound, data):
            return
        turn.unweighed += 1
        HttpToolsProtocol.data_received(self, data)

    def _door(self, bound: InFlightBound, data: bytes) -> bool:
        """Weigh ``data`` at the door: True if it was answered there, or let through on the
        share taken there; False: it goes the usual way, unweighed."""
        if not self._between() or self.transport.is_closing():
            return False
        request = read(data)
        if request is None:
            return False
        surface = surface_of(request)
        made = self._at_door(bound, request, surface)
        if made is not None:
            self._active = self.loop.time()  # its keep-alive timer, if armed, stays
            self._owe(made, request.close)
            return True
        if surface is None:
            return False
        HttpToolsProtocol.data_received(self, data)  # let through, on the share taken here
        if self.transport.is_closing():  # refused as it was parsed (a 400)
            bound.refund()
        else:  # the app enters it on that share (its task has not run yet)
            self.scope[PREPAID] = True  # type: ignore[literal-required]
        return True

    def _between(self) -> bool:
        """Whether the connection is between two requests: the last one read whole and
        answered, nothing of the next one read yet (``on_message_begin`` makes the next
        scope, ``on_headers_complete`` its cycle, ``on_message_complete`` ends its body)."""
        cycle: RequestResponseCycle | None = self.cycle  # None until a first head is whole
        if cycle is None:
            return self.scope is None  # else a request has begun, its head not whole yet
        return (
            cycle.scope is self.scope
            and not cycle.more_body
            and cycle.response_complete
            and not self.pipeline
        )

    def _at_door(self, bound: InFlightBound, request: Request, surface: str | None) -> bytes | None:
        """The answer the door gives ``request`` (a decision on ``surface``, or none): a
        decision's 503 if ``bound`` turns it away, a probe's copy if the process sheds and a
        fresh one is kept; None: it goes the usual way."""
        if surface is not None:
            shed = bound.turn_away(surface, coming=ShedFirst.turn.unweighed)
            return self._answer(bound, request.close) if shed else None
        copies = ShedFirst.copies
        if copies is None or request.method != b"GET" or not bound.shedding:
            return None
        return copies.answer(request.path, self.server_state.default_headers, close=request.close)

    def timeout_keep_alive_handler(self) -> None:
        """Close a connection idle for ``timeout_keep_alive`` seconds, as uvicorn does; one
        that was answered at the door since its timer was armed is given the time it has
        left. (A timer re-armed for every answer at the door would cost more than the
        answer.)"""
        idle = self.loop.time() - self._active
        if idle < self.timeout_keep_alive and not self.transport.is_closing():
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive - idle, self.timeout_keep_alive_handler
            )
            return
        super().timeout_keep_alive_handler()

    def _owe(self, answer: bytes, close: bool) -> None:
        """Write ``answer`` at the loop's next turn, with every other answer owed then.

        Written at once, each answer brings its client's next request into the same read of
        the loop, which then reads for up to a second at a time (libuv polls again while its
        last poll came back full), every task (the decisions let in, the probes) and timer
        waiting behind it. Written at the next turn, the crowd waits its turn like the rest.
        What arrives on the connection meanwhile is held, and read once the answer is out;
        with ``close``, the connection is closed after it."""
        self._held = b""
        owed = ShedFirst.turn.owed
        if not owed:
            self.loop.call_soon(ShedFirst._pay)
        owed.append((self, answer, close))

    @staticmethod
    def _pay() -> None:
        turn = ShedFirst.turn
        owed, turn.owed = turn.owed, []
        for protocol, owed_answer, close in owed:
            held, protocol._held = protocol._held, None
            transport = protocol.transport
            if transport.is_closing():
                continue
            transport.write(owed_answer)
            if close:
                transport.close()
                continue
            if protocol.timeout_keep_alive_task is None:  # idle from now on, unless more comes
                protocol.timeout_keep_alive_task = protocol.loop.call_later(
                    protocol.timeout_keep_alive, protocol.timeout_keep_alive_handler
                )
            if held:
                protocol.data_received(held)

    def _answer(self, bound: InFlightBound, close: bool) -> bytes:
        """The 503 for ``bound``'s reason now, made again when the reason or the server's
        default headers (its ``date``, every second) change, or to close the connection:
        the words of ``bound.why()`` are written once for each, not for every answer."""
        defaults, why, made = ShedFirst.turn.answered
        now_defaults, now_why = self.server_state.default_headers, bound.reason
        if defaults is not now_defaults or why != now_why or close:
            headers, payload = problem_raw(overloaded(bound))
            made = answer(now_defaults, [*headers, _RETRY], payload, close=close)
            if not close:
                ShedFirst.turn.answered = (now_defaults, now_why, made)
        return made
