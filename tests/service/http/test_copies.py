"""Copies of the probes' answers (``http.copies``): ``take()`` asks the app for each probe once
and keeps its status, headers and body whole, with one right ``Content-Length``; ``answer()``
gives the whole HTTP/1.1 answer from a copy, the server's default headers first and an ``Age``
in whole seconds, while the copy is at most ``FRESH`` seconds old; ``keep()`` takes copies every
``INTERVAL`` seconds while the process sheds and every ``REFRESH`` seconds while not, and goes
on when the app fails.

Time is a ``FakeClock`` throughout, and ``keep()``'s sleep moves it, so every count is exact.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import h11
import pytest

from ratekeeper.service.http import copies as copies_module
from ratekeeper.service.http.copies import FRESH, PATHS, ProbeCopies, ask
from ratekeeper.testing import FakeClock

DEFAULTS = [(b"date", b"Tue, 14 Nov 2023 22:13:20 GMT"), (b"server", b"uvicorn")]
HEALTHZ = b'{"status":"ok"}'
READYZ = b'{"status":"unavailable","detail":"the store did not answer"}'
METRICS = (b"# TYPE ratekeeper_up gauge\n", b"ratekeeper_up 1\n")  # in two messages


class Probes:
    """An ASGI app answering each probe differently: ``/healthz`` 200 with its own
    ``Content-Length``, ``/readyz`` 503 without one, ``/metrics`` 200 in two body messages (its
    ``Content-Length`` given); it counts its calls per path and when each was (``clock``), and
    raises for the paths in ``failing``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.calls: Counter[str] = Counter()
        self.at: list[tuple[str, float]] = []
        self.scopes: list[dict[str, Any]] = []
        self.failing: set[str] = set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        self.calls[path] += 1
        self.at.append((path, self.clock()))
        self.scopes.append(scope)
        assert await receive() == {"type": "http.request", "body": b"", "more_body": False}
        if path in self.failing:
            raise RuntimeError("boom")
        if path == "/healthz":
            headers = [(b"content-type", b"application/json"), (b"content-length", b"15")]
            await start(send, 200, headers)
            await send({"type": "http.response.body", "body": HEALTHZ})
        elif path == "/readyz":
            await start(send, 503, [(b"content-type", b"application/json")])
            await send({"type": "http.response.body", "body": READYZ})
        elif path == "/metrics":
            length = b"%d" % len(b"".join(METRICS))
            headers = [(b"content-type", b"text/plain; version=0.0.4"), (b"content-length", length)]
            await start(send, 200, headers)
            await send({"type": "http.response.body", "body": METRICS[0], "more_body": True})
            await send({"type": "http.response.body", "body": METRICS[1]})
        else:
            await start(send, 404, [(b"content-length", b"0")])
            await send({"type": "http.response.body", "body": b""})

    def takes(self) -> list[float]:
        """When each take was: the times ``/healthz`` was asked (every take asks it first)."""
        return [at for path, at in self.at if path == "/healthz"]


async def start(send: Any, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})


def parse(raw: bytes, path: bytes) -> tuple[h11.Response, bytes, h11.Connection]:
    """``raw`` read as the whole answer to ``GET path`` by an HTTP/1.1 client (h11): the
    response, its body, and the client's connection after it."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target=path, headers=[("Host", "rk")]))
    client.send(h11.EndOfMessage())
    client.receive_data(raw)
    response = client.next_event()
    assert isinstance(response, h11.Response), response
    body = b""
    while True:
        event = client.next_event()
        if isinstance(event, h11.EndOfMessage):
            break
        assert isinstance(event, h11.Data), event
        body += event.data
    assert client.next_event() is h11.NEED_DATA  # nothing after the answer
    return response, body, client


def taken(clock: FakeClock) -> tuple[ProbeCopies, Probes]:
    copies, app = ProbeCopies(clock=clock), Probes(clock)
    asyncio.run(copies.take(app))
    return copies, app


# -- take --------------------------------------------------------------------------------------


def test_take_asks_each_probe_once_and_keeps_its_answer_whole() -> None:
    clock = FakeClock(100)
    copies, app = taken(clock)
    assert PATHS == (b"/healthz", b"/readyz", b"/metrics")
    assert app.calls == {"/healthz": 1, "/readyz": 1, "/metrics": 1}
    assert [path for path, _ in app.at] == ["/healthz", "/readyz", "/metrics"]  # in order
    assert copies.copies == {
        b"/healthz": (
            100.0,
            200,
            [(b"content-type", b"application/json"), (b"content-length", b"15")],
            HEALTHZ,
        ),
        b"/readyz": (
            100.0,
            503,
            [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(READYZ))],
            READYZ,
        ),
        b"/metrics": (
            100.0,
            200,
            [
                (b"content-type", b"text/plain; version=0.0.4"),
                (b"content-length", b"%d" % len(b"".join(METRICS))),
            ],
            b"".join(METRICS),
        ),
    }
    for _, _, headers, body in copies.copies.values():  # exactly one right content-length
        lengths = [value for name, value in headers if name == b"content-length"]
        assert lengths == [b"%d" % len(body)]


def test_take_asks_as_a_plain_get_of_the_path_in_this_process() -> None:
    _, app = taken(FakeClock(100))
    scope = app.scopes[1]
    assert (scope["type"], scope["method"], scope["http_version"]) == ("http", "GET", "1.1")
    assert (scope["path"], scope["raw_path"], scope["query_string"]) == ("/readyz", b"/readyz", b"")
    assert scope["headers"] == [(b"host", b"ratekeeper")]


def test_a_wrong_or_chunked_length_from_the_app_is_replaced_by_the_body_s() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [
            (b"content-length", b"999"),
            (b"x-probe", b"1"),
            (b"transfer-encoding", b"chunked"),
            (b"Content-Length", b"7"),
        ]
        await start(send, 200, headers)
        await send({"type": "http.response.body", "body": b"ab", "more_body": True})
        await send({"type": "http.response.body", "more_body": True})  # no body: none
        await send({"type": "http.response.body", "body": b"c"})

    status, headers, body = asyncio.run(ask(app, b"/healthz"))
    assert (status, headers, body) == (200, [(b"x-probe", b"1"), (b"content-length", b"3")], b"abc")


def test_a_new_take_replaces_the_copies_with_their_time() -> None:
    clock = FakeClock(100)
    copies, app = taken(clock)
    clock.advance(3)
    asyncio.run(copies.take(app))
    assert app.calls == {"/healthz": 2, "/readyz": 2, "/metrics": 2}
    assert {path: copy[0] for path, copy in copies.copies.items()} == dict.fromkeys(PATHS, 103.0)


# -- answer ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "reason", "body"),
    [
        (b"/healthz", 200, b"OK", HEALTHZ),
        (b"/readyz", 503, b"Service Unavailable", READYZ),
        (b"/metrics", 200, b"OK", b"".join(METRICS)),
    ],
)
def test_answer_is_the_whole_http_answer_from_the_copy(
    path: bytes, status: int, reason: bytes, body: bytes
) -> None:
    clock = FakeClock(100)
    copies, _ = taken(clock)
    clock.advance(2.75)
    raw = copies.answer(path, DEFAULTS)
    assert raw is not None
    assert raw.startswith(b"HTTP/1.1 %d %s\r\n" % (status, reason))
    response, got, client = parse(raw, path)
    assert (response.status_code, response.http_version, got) == (status, b"1.1", body)
    _, _, headers, _ = copies.copies[path]
    assert list(response.headers.raw_items()) == [*DEFAULTS, *headers, (b"age", b"2")]
    assert client.our_state is h11.DONE and client.their_state is h11.DONE  # kept alive


def test_answer_closes_the_connection_when_asked() -> None:
    clock = FakeClock(100)
    copies, _ = taken(clock)
    raw = copies.answer(b"/healthz", DEFAULTS, close=True)
    assert raw is not None
    response, body, client = parse(raw, b"/healthz")
    assert (response.status_code, body) == (200, HEALTHZ)
    assert list(response.headers.raw_items())[-2:] == [(b"age", b"0"), (b"connection", b"close")]
    assert client.their_state is h11.MUST_CLOSE


def test_answer_gives_the_age_in_whole_seconds() -> None:
    clock = FakeClock(100)
    copies, _ = taken(clock)
    ages = []
    for step in (0, 0.5, 0.5, 0.999, 1.5, 1.25):  # at 0, 0.5, 1, 1.999, 3.499, 4.749
        clock.advance(step)
        raw = copies.answer(b"/readyz", DEFAULTS)
        assert raw is not None
        response, _, _ = parse(raw, b"/readyz")
        ages.append(dict(response.headers.raw_items())[b"age"])
    assert ages == [b"0", b"0", b"1", b"1", b"3", b"4"]


def test_answer_is_none_for_a_path_without_a_copy() -> None:
    clock = FakeClock(100)
    copies = ProbeCopies(clock=clock)
    assert [copies.answer(path, DEFAULTS) for path in PATHS] == [None] * 3  # none taken yet
    copies, _ = taken(clock)
    assert copies.answer(b"/v1/check", DEFAULTS) is None
    assert copies.answer(b"/healthz/", DEFAULTS) is None
    assert copies.answer(b"/healthz", DEFAULTS) is not None


def test_a_copy_answers_until_fresh_seconds_old_and_not_after() -> None:
    clock = FakeClock(100)
    copies, _ = taken(clock)
    clock.advance(FRESH)  # exactly FRESH: still answers
    raw = copies.answer(b"/healthz", DEFAULTS)
    assert raw is not None
    response, _, _ = parse(raw, b"/healthz")
    assert dict(response.headers.raw_items())[b"age"] == b"%d" % FRESH
    clock.advance(1e-6)  # just past
    assert [copies.answer(path, DEFAULTS) for path in PATHS] == [None] * 3
    asyncio.run(copies.take(Probes(clock)))  # a new copy answers again
    assert copies.answer(b"/healthz", DEFAULTS) is not None


def test_a_copy_from_the_future_does_not_answer() -> None:
    clock = FakeClock(100)
    copies, _ = taken(clock)
    clock.set(99.5)  # the clock read before the copy was made
    assert copies.answer(b"/healthz", DEFAULTS) is None


# -- keep --------------------------------------------------------------------------------------


class Enough(Exception):
    """Raised by the fake sleep to stop ``keep()`` after so many looks."""


def keep_for(
    monkeypatch: pytest.MonkeyPatch,
    copies: ProbeCopies,
    app: Any,
    shedding: Callable[[], bool],
    *,
    clock: FakeClock,
    looks: int,
) -> list[float]:
    """Run ``copies.keep(app, shedding)`` on a real loop for ``looks`` looks, its sleep moving
    ``clock`` instead of waiting, with LOOK 0.25, INTERVAL 1 and REFRESH 4 seconds (exact in
    binary). Returns the seconds each sleep was asked for."""
    monkeypatch.setattr(copies_module, "LOOK", 0.25)
    monkeypatch.setattr(copies_module, "INTERVAL", 1.0)
    monkeypatch.setattr(copies_module, "REFRESH", 4.0)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)
        if len(slept) == looks:
            raise Enough

    monkeypatch.setattr(copies_module, "asyncio", SimpleNamespace(sleep=sleep))
    with pytest.raises(Enough):
        asyncio.run(copies.keep(app, shedding))
    return slept


def test_keep_takes_copies_every_refresh_while_not_shedding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(0)
    copies, app = ProbeCopies(clock=clock), Probes(clock)
    slept = keep_for(monkeypatch, copies, app, lambda: False, clock=clock, looks=40)  # 10 s
    assert slept == [0.25] * 40
    assert app.takes() == [0.0, 4.0, 8.0]  # at once, then every REFRESH
    assert app.calls == {"/healthz": 3, "/readyz": 3, "/metrics": 3}
    assert {copy[0] for copy in copies.copies.values()} == {8.0}


def test_keep_takes_copies_every_interval_while_shedding(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(0)
    copies, app = ProbeCopies(clock=clock), Probes(clock)
    keep_for(monkeypatch, copies, app, lambda: True, clock=clock, looks=40)  # 10 s
    assert app.takes() == [float(second) for second in range(10)]  # every INTERVAL
    assert app.calls == {"/healthz": 10, "/readyz": 10, "/metrics": 10}


def test_keep_takes_a_copy_as_soon_as_shedding_starts_if_its_last_is_old(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(0)
    copies, app = ProbeCopies(clock=clock), Probes(clock)
    shedding = lambda: 2.5 <= clock() < 5.5  # noqa: E731
    keep_for(monkeypatch, copies, app, shedding, clock=clock, looks=48)  # 12 s
    # not shedding: at 0; shedding from 2.5 (its last copy 2.5 s old): at once, then every
    # INTERVAL; no longer from 5.5: REFRESH after the last one, at 4.5
    assert app.takes() == [0.0, 2.5, 3.5, 4.5, 8.5]
    assert app.calls == {"/healthz": 5, "/readyz": 5, "/metrics": 5}


def test_keep_goes_on_when_the_app_fails_and_the_old_copies_stay(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ratekeeper.service")
    clock = FakeClock(0)
    copies = ProbeCopies(clock=clock)
    failing: list[set[str]] = []

    class Failing(Probes):
        async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
            # every path fails from 1 s to 3 s: the copies taken at 0 stay
            self.failing = {"/healthz", "/readyz", "/metrics"} if 1 <= clock() < 3 else set()
            failing.append(self.failing)
            await super().__call__(scope, receive, send)

    app = Failing(clock)
    seen: dict[float, dict[bytes, float]] = {}

    def shedding() -> bool:
        seen[clock()] = {path: copy[0] for path, copy in copies.copies.items()}
        return True

    keep_for(monkeypatch, copies, app, shedding, clock=clock, looks=16)  # 4 s
    assert app.takes() == [0.0, 1.0, 2.0, 3.0]  # asked at every INTERVAL, failing or not
    # each path is tried on its own: a failing one does not stop the others being asked
    assert app.calls == {"/healthz": 4, "/readyz": 4, "/metrics": 4}
    assert seen[2.75] == dict.fromkeys(PATHS, 0.0)  # the old copies, after two failed takes
    assert {copy[0] for copy in copies.copies.values()} == {3.0}  # then new ones again
    assert [(record.levelno, record.getMessage()) for record in caplog.records] == [
        (logging.DEBUG, f"could not copy the answer to {path.decode()}: boom")
        for _ in range(2)  # the takes at 1 s and 2 s
        for path in PATHS
    ]


def test_a_failing_probe_keeps_its_old_copy_and_those_asked_before_it_are_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(0)
    copies, app = ProbeCopies(clock=clock), Probes(clock)
    asyncio.run(copies.take(app))
    clock.advance(1)
    app.failing = {"/readyz"}
    keep_for(monkeypatch, copies, app, lambda: True, clock=clock, looks=1)
    assert copies.copies[b"/healthz"][0] == 1.0
    assert copies.copies[b"/readyz"][0] == 0.0  # the old one stays
    assert copies.copies[b"/metrics"][0] == 1.0  # and the one asked after it is new too
    assert copies.answer(b"/readyz", DEFAULTS) is not None  # and answers while fresh


def test_an_app_that_gives_no_answer_is_a_failed_take(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ratekeeper.service")
    calls: list[str] = []

    async def silent(scope: dict[str, Any], receive: Any, send: Any) -> None:
        calls.append(scope["path"])

    clock = FakeClock(0)
    copies = ProbeCopies(clock=clock)
    keep_for(monkeypatch, copies, silent, lambda: True, clock=clock, looks=8)  # 2 s
    # tried at 0 and 1, each path on its own, then on
    assert calls == ["/healthz", "/readyz", "/metrics"] * 2
    assert copies.copies == {}
    # no answer started: ask() finds no status (KeyError 'status'); take itself never raises
    assert [(record.levelno, record.getMessage()) for record in caplog.records] == [
        (logging.DEBUG, f"could not copy the answer to {path.decode()}: 'status'")
        for _ in range(2)
        for path in PATHS
    ]


def test_keep_on_a_real_loop_takes_copies_until_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(copies_module, "LOOK", 0.001)
    monkeypatch.setattr(copies_module, "INTERVAL", 0.01)
    monkeypatch.setattr(copies_module, "REFRESH", 0.05)
    copies = ProbeCopies()  # the real clock
    app = Probes(lambda: 0.0)

    async def test() -> None:
        task = asyncio.create_task(copies.keep(app, lambda: True))
        for _ in range(1000):  # a guard, not a measure
            if app.calls["/metrics"] >= 3:
                break
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(test())
    assert app.calls["/metrics"] >= 3
    assert set(copies.copies) == set(PATHS)
    assert copies.answer(b"/healthz", DEFAULTS) is not None
