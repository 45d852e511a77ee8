"""``ShedFirst``, uvicorn's httptools protocol answering at the door: served in-process by a
real ``uvicorn.Server`` on the service's loop (``runtime.loop``), with an app that counts its
calls, and an in-flight bound the test holds full (or not) by hand.

While the bound sheds, one whole decision request is answered ``503 overloaded`` from its bytes
and the app never sees it; anything else (a probe, two requests at once) reaches the app; while
it does not shed, every request does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, NamedTuple

import pytest

pytest.importorskip("httptools")
uvicorn = pytest.importorskip("uvicorn")

from ratekeeper.service.asgi import Receive, Scope, Send  # noqa: E402
from ratekeeper.service.http.app import overloaded  # noqa: E402
from ratekeeper.service.http.copies import ProbeCopies  # noqa: E402
from ratekeeper.service.http.responses import problem_raw, send_raw  # noqa: E402
from ratekeeper.service.http.shed import PREPAID  # noqa: E402
from ratekeeper.service.inflight import InFlightBound  # noqa: E402
from ratekeeper.service.runtime.loop import new_event_loop  # noqa: E402
from ratekeeper.service.runtime.protocol import BURST, ShedFirst, Turn  # noqa: E402
from ratekeeper.testing import FakeClock  # noqa: E402

#: Seconds before a test that would otherwise hang fails instead (a guard, not a measure).
HANG = 10.0
CHECK = b'{"key":"user:1","limit":"10/minute"}'
POST_CHECK = (
    b"POST /v1/check HTTP/1.1\r\nHost: rk\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(CHECK), CHECK)
)
GET_HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: rk\r\n\r\n"
GET_NGINX = b"GET /v1/nginx HTTP/1.1\r\nHost: rk\r\nX-Real-IP: 10.0.0.1\r\n\r\n"
OVERLOADED = {
    "type": "urn:ratekeeper:problem:overloaded",
    "title": "Service Unavailable",
    "status": 503,
    "detail": "the service is deciding 1 request, the most it takes at once; try again in 1 s",
}


class Counting:
    """An ASGI app that keeps each request it is called with (method, path, body) and answers
    200 ``<method> <path> <how many calls so far>``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bytes]] = []

    async def __call__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        assert scope["type"] == "http"
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.calls.append((scope["method"], scope["path"], body))
        payload = f"{scope['method']} {scope['path']} {len(self.calls)}".encode()
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(payload))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


class Entering(Counting):
    """``Counting`` behind the in-flight ``bound``, as the service's app is (``http.app``): it
    records ``scope.get(PREPAID)`` for each request (``prepaid``), enters the bound with
    ``prepaid=PREPAID in scope`` and records whether it was let in (``entered``); a request
    shed there is answered the app's ``503 overloaded``; one let in stays in flight until
    ``release`` is set (at once unless ``hold``), is answered as ``Counting`` answers, and
    leaves."""

    def __init__(self, bound: InFlightBound, *, hold: bool = False) -> None:
        super().__init__()
        self.bound = bound
        self.prepaid: list[object] = []
        self.entered: list[bool] = []
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.prepaid.append(scope.get(PREPAID))
        entered = self.bound.enter("http", prepaid=PREPAID in scope)
        self.entered.append(entered)
        if not entered:
            headers, payload = problem_raw(overloaded(self.bound))
            await send_raw(send, 503, [*headers, (b"retry-after", b"1")], payload)
            return
        try:
            await self.release.wait()
            await super().__call__(scope, receive, send)
        finally:
            self.bound.leave()


class Answer(NamedTuple):
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        values = [value for key, value in self.headers if key == name]
        assert len(values) <= 1, self.headers
        return values[0] if values else None


async def read_answer(reader: asyncio.StreamReader) -> Answer:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HANG)
    status_line, *lines = head[:-4].split(b"\r\n")
    version, status, _ = status_line.split(b" ", 2)
    assert version == b"HTTP/1.1"
    headers = []
    for line in lines:
        name, _, value = line.partition(b":")
        headers.append((name.strip().lower(), value.strip()))
    answer = Answer(int(status), headers, b"")
    length = answer.header(b"content-length")
    assert length is not None, headers
    body = await asyncio.wait_for(reader.readexactly(int(length)), HANG)
    return answer._replace(body=body)


class Connection:
    """One client connection: ``ask(data)`` writes ``data`` and reads one answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def ask(self, data: bytes) -> Answer:
        self.writer.write(data)
        await self.writer.drain()
        return await read_answer(self.reader)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


class Served(NamedTuple):
    server: Any  # uvicorn.Server
    port: int

    async def connect(self) -> Connection:
        return Connection(*await asyncio.open_connection("127.0.0.1", self.port))


@contextlib.asynccontextmanager
async def serving(app: Counting) -> AsyncIterator[Served]:
    """``app`` served by uvicorn with ``ShedFirst`` on a socket of its own, until the end."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app,
        http=ShedFirst,
        loop="ratekeeper.service.runtime.loop:new_event_loop",
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(int(HANG / 0.01)):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        assert server.started, "uvicorn did not start"
        yield Served(server, sock.getsockname()[1])
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, HANG)
        sock.close()


def reset_door() -> None:
    ShedFirst.bound = None
    ShedFirst.copies = None
    ShedFirst.turn = Turn()  # what is counted over a turn of the loop, the loop included


@pytest.fixture(autouse=True)
def door() -> Iterator[None]:
    """``ShedFirst``'s class-wide state, as it was, before and after each test."""
    reset_door()
    yield
    reset_door()


def run(test: Callable[[], Awaitable[None]]) -> None:
    loop = new_event_loop()
    try:
        loop.run_until_complete(test())
    finally:
        loop.close()


def full_bound() -> InFlightBound:
    bound = InFlightBound(1)
    bound.in_flight = 1  # the bound reached: every decision is shed
    assert bound.shedding
    return bound


def assert_overloaded(answer: Answer) -> None:
    assert answer.status == 503
    assert [name for name, _ in answer.headers] == [
        b"date",
        b"content-type",
        b"content-length",
        b"retry-after",
    ]
    assert answer.header(b"content-type") == b"application/problem+json"
    assert answer.header(b"retry-after") == b"1"
    assert answer.header(b"connection") is None  # kept alive
    assert json.loads(answer.body) == OVERLOADED


# -- While the bound sheds ---------------------------------------------------------------------


def test_a_whole_decision_is_answered_503_at_the_door_and_the_app_never_sees_it() -> None:
    app = Counting()
    bound = ShedFirst.bound = full_bound()

    async def test() -> None:
        async with serving(app) as served:
            connection = await served.connect()
            assert_overloaded(await connection.ask(POST_CHECK))
            assert app.calls == []
            assert bound.shed == {"http": 1, "nginx": 0, "grpc": 0}
            assert_overloaded(await connection.ask(GET_NGINX))
            assert app.calls == []
            assert bound.shed == {"http": 1, "nginx": 1, "grpc": 0}
            await connection.close()

    run(test)
    assert bound.in_flight == 1  # the door never lets anything in


def test_a_probe_reaches_the_app_while_decisions_are_shed() -> None:
    app = Counting()
    bound = ShedFirst.bound = full_bound()

    async def test() -> None:
        async with serving(app) as served:
            connection = await served.connect()
            answer = await connection.ask(GET_HEALTHZ)
            assert (answer.status, answer.body) == (200, b"GET /healthz 1")
            assert app.calls == [("GET", "/healthz", b"")]
            await connection.close()

    run(test)
    assert bound.shed == {"http": 0, "nginx": 0, "grpc": 0}


def test_answers_on_one_kept_alive_connection_come_in_order() -> None:
    app = Counting()
    bound = ShedFirst.bound = full_bound()

    async def test() -> None:
        async with serving(app) as served:
            connection = await served.connect()
            first = await connection.ask(POST_CHECK)
            second = await connection.ask(GET_HEALTHZ)
            third = await connection.ask(POST_CHECK)
            fourth = await connection.ask(GET_HEALTHZ)
            assert_overloaded(first)
            assert (second.status, second.body) == (200, b"GET /healthz 1")
            assert_overloaded(third)
            assert (fourth.status, fourth.body) == (200, b"GET /healthz 2")
            assert len(served.server.server_state.connections) == 1  # one connection, all along
            await connection.close()

    run(test)
    assert app.calls == [("GET", "/healthz", b"")] * 2
    assert bound.shed["http"] == 2


def test_two_requests_at_once_go_the_usual_way_and_are_answered_in_order() -> None:
    app = Counting()
    bound = ShedFirst.bound = full_bound()
    peek = POST_CHECK.replace(b"/v1/check", b"/v1/peek")

    async def test() -> None:
        async with serving(app) as served:
            connection = await served.connect()
            connection.writer.write(POST_CHECK + peek)  # one write: read as one chunk
            await connection.writer.drain()
            first = await read_answer(connection.reader)
            second = await read_answer(connection.reader)
            assert (first.status, first.body) == (200, b"POST /v1/check 1")
            assert (second.status, second.body) == (200, b"POST /v1/peek 2")
            await connection.close()

    run(test)
    assert app.calls == [("POST", "/v1/check", CHECK), ("POST", "/v1/peek", CHECK)]
    assert bound.shed["http"] == 0  # this trivial app sheds nothing itself


def test_what_comes_while_an_answer_is_owed_is_read_after_it() -> None:
    app = Counting()
    bound = ShedFirst.bound = full_bound()

    async def test() -> None:
        async with serving(app) as served:
            connection = await served.connect()
            for _ in range(int(HANG / 0.01)):
                if served.server.server_state.connections:
                    break
                await asyncio.sleep(0.01)
            (protocol,) = served.server.server_state.connections
            assert isinstance(protocol, ShedFirst)
            # two reads in one turn of the loop: the door owes the first its 503 until the
            # next turn, and holds the second until that answer is out
            protocol.data_received(POST_CHECK)
            protocol.data_received(GET_HEALTHZ)
            assert app.calls == []
            first = await read_answer(connection.reader)
            second = await read_answer(connection.reader)
            assert_overloaded(first)
            assert (second.status, second.body) == (200, b"GET /healthz 1")
            await connection.close()

    run(test)
    assert app.calls == [("GET", "/healthz", b"")]
    assert bound.shed["http"] == 1


def test_a_decision_that_closes_its_connection_is_answered_then_closed() -> None:
    app = Counting()
    bound = ShedFirst.bound = full_bound()
    closing = POST_CHECK.replace(b"Host: rk\r\n", b"Host: rk\r\nConnection: close\r\n")

    async def test() -> None:
        async with serving(app) as served:
            connection = await served.connect()
            answer = await connection.ask(closing)
            assert answer.status == 503
            assert answer.header(b"connection") == b"close"
            assert answer.header(b"retry-after") == b"1"
            assert json.loads(answer.body) == OVERLOADED
            assert await asyncio.wait_for(connection.reader.read(), HANG) == b""  # closed
            await connection.close()

    run(test)
    assert app.calls == []
    assert bound.shed["http"] == 1


# -- While it does not shed --------------------------------------------------------------------


def test_a_decision_reaches_the_app_while_the_bound_has_room() -> None:
    app = Counting()
    bound = ShedFirst.bound = InFlightBound(1)
    assert not bound.shedding

    async def test() -> None:
        async with serving(app) as served:
            connection = await served.connect()
            answer = await connection.ask(POST_CHECK)
            assert (answer.status, answer.body) == (200, b"POST /v1/check 1")
            answer = await connection.ask(GET_NGINX)
            assert (answer.status, answer.body) == (200, b"GET /v1/nginx 2")
            await connection.close()

    run(test)
    assert app.calls == [("POST", "/v1/check", CHECK), ("GET", "/v1/nginx", b"")]
    assert bound.shed == {"http": 0, "nginx": 0, "grpc": 0}


def test_without_a_bound_the_protocol_is_uvicorn_s() -> None:
    app = Counting()
    assert ShedFirst.bound is None

    async def test() -> None:
        async with serving(app) as served:
            connection = await served.connect()
            answer = await connection.ask(POST_CHECK)
            assert (answer.status, answer.body) == (200, b"POST /v1/check 1")
            await connection.close()

    run(test)


def test_a_share_of_the_decisions_is_let_through_the_door_exactly() -> None:
    app = Counting()
    bound = ShedFirst.bound = InFlightBound(100, max_wait=0.1, clock=FakeClock(0))
    bound.waiting.read(1.0)
    bound.waiting.read(1.0)  # a quarter let in
    assert bound.waiting.admitting == 0.25

    async def test() -> None:
        async with serving(app) as served:
            connection = await served.connect()
            statuses = [(await connection.ask(POST_CHECK)).status for _ in range(8)]
            assert statuses == [503, 503, 503, 200] * 2
            await connection.close()

    run(test)
    assert len(app.calls) == 2
    assert bound.shed["http"] == 6


# -- Probes from their copies ------------------------------------------------------------------


def test_a_probe_is_answered_from_its_copy_while_decisions_are_shed() -> None:
    app = Counting()
    ShedFirst.bound = full_bound()
    clock = FakeClock(100)
    copies = ShedFirst.copies = ProbeCopies(clock=clock)

    async def test() -> None:
        await copies.take(app)  # the app answers each probe once, for the copy
        assert [path for _, path, _ in app.calls] == ["/healthz", "/readyz", "/metrics"]
        clock.advance(2)
        async with serving(app) as served:
            connection = await served.connect()
            answer = await connection.ask(GET_HEALTHZ)
            assert (answer.status, answer.body) == (200, b"GET /healthz 1")
            assert answer.header(b"age") == b"2"
            assert answer.header(b"date") is not None
            await connection.close()

    run(test)
    assert len(app.calls) == 3  # none since the copies


# -- A burst: past BURST reads in one turn, every decision is weighed --------------------------

#: The 503 the door gives while 10 decisions are in flight or on their way in.
OVERLOADED_10 = {
    **OVERLOADED,
    "detail": "the service is deciding 10 requests, the most it takes at once; try again in 1 s",
}


def assert_overloaded_10(answer: Answer) -> None:
    assert answer.status == 503
    assert answer.header(b"retry-after") == b"1"
    assert answer.header(b"content-type") == b"application/problem+json"
    assert json.loads(answer.body) == OVERLOADED_10


#: The requests of a 300-read burst: the first ``BURST`` not weighed, then the rest turned
#: away at the door, the ``BURST`` on their way in already filling ``InFlightBound(10)``.
COUNT = BURST + 44
TURNED_AWAY = COUNT - BURST


def test_a_burst_s_first_turn_lets_through_burst_reads_then_turns_the_rest_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real connections, each with one whole decision written before the server's loop runs:
    all are read in one turn. The first ``BURST`` reads go the usual way, not weighed (the
    bound does not shed): the app enters each on the share it takes itself (no ``max_wait``:
    all of it) while ``in_flight < 10``, so the first 10 are let in (held in flight here) and
    the other ``BURST - 10`` shed by the app. From the ``BURST``-th on each read is weighed:
    the ``BURST`` on their way in already fill the bound (``coming``), so the door turns every
    one of the other 44 away at once, and lets none through to be shed after parsing."""
    bound = ShedFirst.bound = InFlightBound(10, clock=FakeClock(0))  # prepaid never expires
    app = Entering(bound, hold=True)
    turns: list[int] = []

    class Recording(Turn):
        __slots__ = ()

        def next(self) -> None:
            turns.append(self.reads)
            super().next()

    ShedFirst.turn = Recording()

    async def test() -> None:
        connections: list[Connection] = []
        async with serving(app) as served:
            try:
                for _ in range(COUNT):
                    connections.append(await served.connect())
                for _ in range(int(HANG / 0.01)):
                    if len(served.server.server_state.connections) == COUNT:
                        break
                    await asyncio.sleep(0.01)
                assert len(served.server.server_state.connections) == COUNT
                assert not bound.shedding
                for connection in connections:  # no await: the server reads none of it yet
                    connection.writer.write(POST_CHECK)
                reading = asyncio.gather(
                    *(read_answer(connection.reader) for connection in connections)
                )
                for _ in range(int(HANG / 0.01)):
                    if len(app.prepaid) == BURST:
                        break
                    await asyncio.sleep(0.01)
                # the app has seen every request the door did not turn away, in read order
                assert app.prepaid == [None] * BURST
                assert app.entered == [True] * 10 + [False] * (BURST - 10)
                assert (bound.in_flight, bound.waiting.prepaid) == (10, 0)
                assert bound.shed == {"http": TURNED_AWAY + BURST - 10, "nginx": 0, "grpc": 0}
                app.release.set()
                answers = await reading
            finally:
                for connection in connections:
                    await connection.close()
        assert turns[0] == COUNT, "the burst was not read in one turn of the loop"
        statuses = Counter(answer.status for answer in answers)
        assert statuses == {200: 10, 503: COUNT - 10}
        for answer in answers:
            if answer.status == 503:
                assert_overloaded_10(answer)
        assert sorted(answer.body for answer in answers if answer.status == 200) == sorted(
            b"POST /v1/check %d" % n for n in range(1, 11)
        )

    run(test)
    assert len(app.calls) == 10
    assert bound.shed == {"http": COUNT - 10, "nginx": 0, "grpc": 0}
    assert (bound.in_flight, bound.waiting.prepaid) == (0, 0)


class FakeTransport(asyncio.Transport):
    """A connection's transport that keeps what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Door(NamedTuple):
    """``ShedFirst`` protocols, each on a fake transport of its own, in one process."""

    protocols: list[ShedFirst]
    transports: list[FakeTransport]
    state: Any  # uvicorn's ServerState

    async def settle(self) -> None:
        """Run the loop until the app has answered every request let through and every
        answer owed at the door is written."""
        for _ in range(1000):  # a guard, not a measure
            await asyncio.sleep(0)
            if not self.state.tasks and not ShedFirst.turn.owed:
                return
        raise AssertionError("the door did not settle")

    async def answers(self) -> list[Answer | None]:
        """Each connection's one answer (None: nothing written)."""
        found: list[Answer | None] = []
        for transport in self.transports:
            if not transport.written:
                found.append(None)
                continue
            reader = asyncio.StreamReader()
            reader.feed_data(transport.written)
            reader.feed_eof()
            found.append(await read_answer(reader))
            assert await reader.read() == b""  # one answer, no more
        return found


def door_of(app: Counting, count: int, loop: asyncio.AbstractEventLoop | None = None) -> Door:
    """``count`` protocols serving ``app`` on ``loop`` (the running one by default)."""
    config = uvicorn.Config(app, http=ShedFirst, lifespan="off", log_config=None, access_log=False)
    state = uvicorn.server.ServerState()
    state.default_headers = [(b"date", b"Tue, 14 Nov 2023 22:13:20 GMT")]
    loop = loop or asyncio.get_running_loop()
    protocols, transports = [], []
    for _ in range(count):
        protocol, transport = ShedFirst(config, state, {}, _loop=loop), FakeTransport()
        protocol.connection_made(transport)
        protocols.append(protocol)
        transports.append(transport)
    return Door(protocols, transports, state)


def test_a_burst_s_reads_are_weighed_from_the_burst_th_on_exactly() -> None:
    """The same burst, read by hand in one turn of the loop: which reads reach the app, in
    order, which of them the door marked ``PREPAID``, and which the app lets in."""
    bound = ShedFirst.bound = InFlightBound(10, clock=FakeClock(0))
    app = Entering(bound, hold=True)

    async def test() -> None:
        door = door_of(app, COUNT)
        for protocol in door.protocols:  # one turn: nothing awaited
            protocol.data_received(POST_CHECK)
        assert (ShedFirst.turn.reads, ShedFirst.turn.unweighed) == (COUNT, BURST)
        assert bound.waiting.prepaid == 0  # the BURST on their way in fill the bound
        assert bound.shed["http"] == TURNED_AWAY
        owed = [protocol for protocol, _, _ in ShedFirst.turn.owed]
        assert owed == door.protocols[BURST:]  # the first BURST went on
        parsed = door.protocols[:BURST]
        assert [protocol.scope.get(PREPAID) for protocol in parsed] == [None] * BURST
        assert app.prepaid == []  # no task has run yet
        for _ in range(1000):  # a guard, not a measure
            if len(app.prepaid) == BURST:
                break
            await asyncio.sleep(0)
        assert app.prepaid == [None] * BURST
        # the unweighed take the share (all of it) while in_flight < 10, the rest are shed
        assert app.entered == [True] * 10 + [False] * (BURST - 10)
        assert (bound.in_flight, bound.waiting.prepaid) == (10, 0)
        assert bound.shed["http"] == TURNED_AWAY + BURST - 10
        app.release.set()
        await door.settle()
        assert ShedFirst.turn.reads == 0  # the next turn
        answers = await door.answers()
        assert [answer and answer.status for answer in answers] == [200] * 10 + [503] * (COUNT - 10)
        assert [answer and answer.body for answer in answers[:10]] == [
            b"POST /v1/check %d" % n for n in range(1, 11)
        ]
        for answer in answers[10:]:  # shed by the app, then at the door: the same answer
            assert answer is not None
            assert_overloaded_10(answer)
        assert not any(transport.closed for transport in door.transports)

    run(test)
    assert len(app.calls) == 10
    assert bound.shed == {"http": COUNT - 10, "nginx": 0, "grpc": 0}
    assert (bound.in_flight, bound.waiting.prepaid) == (0, 0)


def test_the_read_count_starts_from_0_on_a_new_loop_after_a_loop_closed_mid_turn() -> None:
    """A loop closed before its next turn never resets the count of its turn's reads: the
    next loop counts from 0 all the same, so its reads are not weighed as if in a burst, and
    its turns reset the count."""
    stale_app = Counting()
    stale = new_event_loop()
    try:
        door = door_of(stale_app, BURST, stale)
        for protocol in door.protocols:  # a head not yet whole: no task is made
            protocol.data_received(b"GET /healthz HTTP/1.1\r\nHost: rk\r\n")
    finally:
        stale.close()  # before its next turn
    assert (ShedFirst.turn.reads, ShedFirst.turn.loop) == (BURST, stale)
    assert stale_app.calls == []
    bound = ShedFirst.bound = InFlightBound(10, clock=FakeClock(0))
    app = Entering(bound)

    async def test() -> None:
        door = door_of(app, 3)
        counts = []
        for protocol in door.protocols:
            protocol.data_received(POST_CHECK)
            counts.append(ShedFirst.turn.reads)
            assert ShedFirst.turn.loop is asyncio.get_running_loop()
            await asyncio.sleep(0)  # the next turn
            counts.append(ShedFirst.turn.reads)
        assert counts == [1, 0] * 3
        # none was weighed: not marked, nothing prepaid, nothing shed
        assert [protocol.scope.get(PREPAID) for protocol in door.protocols] == [None] * 3
        assert bound.waiting.prepaid == 0
        await door.settle()
        answers = await door.answers()
        assert [answer and (answer.status, answer.body) for answer in answers] == [
            (200, b"POST /v1/check %d" % n) for n in range(1, 4)
        ]

    run(test)
    assert app.prepaid == [None] * 3
    assert app.entered == [True] * 3
    assert bound.shed == {"http": 0, "nginx": 0, "grpc": 0}
    assert (bound.in_flight, bound.waiting.prepaid) == (0, 0)


def test_up_to_burst_reads_in_a_turn_are_not_weighed_and_a_new_turn_counts_anew() -> None:
    app = Counting()
    bound = ShedFirst.bound = InFlightBound(10, clock=FakeClock(0))

    async def test() -> None:
        door = door_of(app, 2 * BURST)
        for protocol in door.protocols[:BURST]:
            protocol.data_received(POST_CHECK)
        assert ShedFirst.turn.reads == BURST
        await asyncio.sleep(0)  # the next turn: its reads are counted from 0
        assert ShedFirst.turn.reads == 0
        for protocol in door.protocols[BURST:]:
            protocol.data_received(POST_CHECK)
        assert ShedFirst.turn.owed == []
        await door.settle()
        answers = await door.answers()
        assert [answer and answer.status for answer in answers] == [200] * (2 * BURST)

    run(test)
    assert len(app.calls) == 2 * BURST  # far past the bound: this app never enters it
    assert bound.shed["http"] == 0
    assert bound.waiting.prepaid == 0


def test_a_probe_in_a_burst_goes_to_the_app_unless_the_bound_sheds() -> None:
    app = Counting()
    bound = ShedFirst.bound = InFlightBound(10, clock=FakeClock(0))
    copies = ShedFirst.copies = ProbeCopies(clock=FakeClock(100))

    async def test() -> None:
        await copies.take(app)  # a fresh copy of each probe
        door = door_of(app, BURST + 2)
        for protocol in door.protocols[:BURST]:
            protocol.data_received(POST_CHECK)
        assert not bound.shedding  # none of them was counted
        door.protocols[BURST].data_received(GET_HEALTHZ)  # weighed turn, but no shedding
        assert ShedFirst.turn.owed == []
        bound.in_flight = 10  # now it sheds: the same probe is answered from its copy
        door.protocols[BURST + 1].data_received(GET_HEALTHZ)
        assert [protocol for protocol, _, _ in ShedFirst.turn.owed] == [door.protocols[BURST + 1]]
        await door.settle()
        answers = await door.answers()
        usual, copied = answers[BURST], answers[BURST + 1]
        assert usual is not None
        assert copied is not None
        assert (usual.status, usual.body) == (200, b"GET /healthz %d" % (3 + BURST + 1))
        assert usual.header(b"age") is None
        assert (copied.status, copied.body) == (200, b"GET /healthz 1")  # the copy's
        assert copied.header(b"age") == b"0"

    run(test)
    assert [path for _, path, _ in app.calls].count("/healthz") == 2  # copy, and the usual way
    assert bound.shed["http"] == 0


# -- A request let through that the parser refuses ---------------------------------------------

OVERLOADED_SHARE = {
    **OVERLOADED,
    "detail": "requests wait here longer than the 0.1 s they may; only part of them is decided;"
    " try again in 1 s",
}
MALFORMED = POST_CHECK.replace(b"Host: rk\r\n", b"Host: rk\r\nNo colon here\r\n")


def assert_refused_400(answer: Answer) -> None:
    assert answer.status == 400
    assert answer.header(b"connection") == b"close"
    assert answer.body == b"Invalid HTTP request received."


def test_a_malformed_request_let_through_the_door_gets_a_400_and_its_share_back() -> None:
    app = Counting()
    bound = ShedFirst.bound = InFlightBound(100, max_wait=0.1, clock=FakeClock(0))
    bound.waiting.read(1.0)  # half let in: every other decision
    assert (bound.waiting.admitting, bound.shedding) == (0.5, True)

    async def test() -> None:
        async with serving(app) as served:
            connection = await served.connect()
            try:
                first = await connection.ask(POST_CHECK)  # turned away: its credit taken
                second = await connection.ask(MALFORMED)  # let through, refused by httptools
                rest = await asyncio.wait_for(connection.reader.read(), HANG)
            finally:
                await connection.close()
        assert (first.status, first.header(b"retry-after")) == (503, b"1")
        assert json.loads(first.body) == OVERLOADED_SHARE
        assert_refused_400(second)
        assert rest == b""  # closed after the 400
        assert bound.waiting.prepaid == 0  # refunded

    run(test)
    assert app.calls == []
    assert bound.shed["http"] == 1


def test_a_malformed_request_let_through_in_a_burst_gets_a_400_and_its_share_back() -> None:
    app = Counting()
    # room for the BURST on their way in and more: the door lets the next ones through
    bound = ShedFirst.bound = InFlightBound(1000, clock=FakeClock(0))

    async def test() -> None:
        door = door_of(app, BURST + 2)
        for protocol in door.protocols[:BURST]:
            protocol.data_received(POST_CHECK)
        door.protocols[BURST].data_received(MALFORMED)  # weighed, let through, refused
        assert door.transports[BURST].closed
        assert bound.waiting.prepaid == 0
        door.protocols[BURST + 1].data_received(POST_CHECK)  # weighed, let through
        assert bound.waiting.prepaid == 1
        await door.settle()
        answers = await door.answers()
        refused = answers[BURST]
        assert refused is not None
        assert_refused_400(refused)
        assert [answer and answer.status for answer in answers[BURST + 1 :]] == [200]

    run(test)
    assert len(app.calls) == BURST + 1
    assert bound.shed["http"] == 0
