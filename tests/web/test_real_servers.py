"""Real servers over loopback, many clients at once: exactly the limit is admitted.

uvicorn serves a Starlette app behind the ASGI middleware, and waitress a Flask app behind the
WSGI middleware; 16 client threads send 200 requests against a limit of 50 (an exact sliding
log over a day, so no window edge can pass more).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx

from ratekeeper import AsyncLimiter, Limit, Limiter
from ratekeeper.web import RateLimit
from tests.servers import free_port

LIMIT = Limit(50, 86_400, "sliding_log")
REQUESTS, CLIENTS = 200, 16


def hammer(url: str) -> Counter[int]:
    """``REQUESTS`` GETs of ``url`` from ``CLIENTS`` threads, each with its own connection."""
    tickets = iter(range(REQUESTS))
    lock = threading.Lock()

    def client(_: int) -> list[int]:
        statuses = []
        with httpx.Client(timeout=30) as session:
            while True:
                with lock:
                    if next(tickets, None) is None:
                        return statuses
                statuses.append(session.get(url).status_code)

    with ThreadPoolExecutor(CLIENTS) as pool:
        return Counter(status for found in pool.map(client, range(CLIENTS)) for status in found)


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within 30 s")
        time.sleep(0.02)


@contextmanager
def uvicorn_serving(app: Any) -> Iterator[str]:
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "uvicorn's start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def waitress_serving(app: Any) -> Iterator[str]:
    import waitress

    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=8)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        server.close()
        server.task_dispatcher.shutdown()
        thread.join(timeout=30)


def test_uvicorn_admits_exactly_the_limit_to_concurrent_clients() -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from ratekeeper.web.asgi import RateLimitMiddleware

    async def home(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/", home)])
    decider = AsyncLimiter()
    app.add_middleware(RateLimitMiddleware, decider=decider, limits=[RateLimit(LIMIT)])
    with uvicorn_serving(app) as url:
        statuses = hammer(url + "/")
    assert statuses == {200: 50, 429: 150}


def test_waitress_admits_exactly_the_limit_to_concurrent_clients() -> None:
    from flask import Flask

    from ratekeeper.web.wsgi import RateLimitMiddleware

    app = Flask(__name__)

    @app.get("/")
    def home() -> str:
        return "ok"

    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, Limiter(), [RateLimit(LIMIT)])  # type: ignore[method-assign]
    with waitress_serving(app) as url:
        statuses = hammer(url + "/")
    assert statuses == {200: 50, 429: 150}
