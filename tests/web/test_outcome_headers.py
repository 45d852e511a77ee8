"""The headers of a request charged by outcome tell what its result left, in every adapter.

A login limit of 5 in 15 minutes charges failed logins only (``charge_statuses={401, 403}``):
each attempt is counted before its handler runs and given back when it succeeds. A login given
back shows the remaining as if it had never been counted, so 20 good logins each say 5 left
(and a reset of 0: nothing is counted), then wrong passwords say 4, 3, 2, 1, 0, and the next
attempts are refused with ``Retry-After``. The IETF fields say the same (``ietf=True``).
uvicorn serves the ASGI adapters and waitress the WSGI ones; Django's views are called through
its test client, and its async view through uvicorn. The store's clock is a ``FakeClock``, so
every value is exact.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from ratekeeper import (
    AsyncLimiter,
    AsyncMemoryStore,
    Decision,
    Limit,
    Limiter,
    MemoryStore,
    RateLimitExceeded,
    StoreError,
)
from ratekeeper.testing import FakeClock
from ratekeeper.web import Gate, HandlerResult, RateLimit, Request, keys
from tests.web.servers import uvicorn_serving, waitress_serving
from tests.web.told import Told, told

LOGIN = Limit(5, 900, "sliding_log")
FAILED = {401, 403}
PASSWORDS = ["right"] * 20 + ["wrong"] * 6 + ["right"]
EXPECTED: list[Told] = (
    [(200, "5", "5", "0", None, '"default";r=5;t=0')] * 20
    + [(401, "5", str(n), "900", None, f'"default";r={n};t=900') for n in (4, 3, 2, 1, 0)]
    + [(429, "5", "0", "900", "900", '"default";r=0;t=900')] * 2
)


def login_limit() -> RateLimit:
    return RateLimit(LOGIN, key=keys.query("user"), scope="login", charge_statuses=FAILED)


@contextmanager
def served(serving: Callable[[Any], Any], app: Any) -> Iterator[Callable[[str], Told]]:
    """``app`` on a real server: a login with a password, and what its response told."""
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as session:

        def login(password: str) -> Told:
            answer = session.post(f"/login?user=alice&password={password}")
            return told(answer.status_code, answer.headers)

        yield login


# -- The gate: what settling returns --------------------------------------------------------


class Unrefunding(Limiter):
    """A limiter whose store fails every give-back."""

    def refund(self, key: str, limit: Any, cost: int, at: float) -> None:
        raise StoreError("the store is down")


def attempt(gate: Gate, status: int, user: str = "alice") -> Decision:
    """One login of ``user`` through ``gate`` that came to ``status``: its settled decision."""
    outcome = gate.settle(
        gate.decide(Request("POST", "/login", {}, "10.0.0.1", query_string=f"user={user}")),
        HandlerResult(status),
    )
    decision = outcome.statuses[0]
    assert isinstance(decision, Decision) and not outcome.pending
    return decision


def test_a_settled_outcome_tells_what_the_result_left() -> None:
    clock = FakeClock()
    limiter = Limiter(MemoryStore(clock=clock))
    gate = Gate(limiter, [login_limit()])
    assert attempt(gate, 200)[:4] == (True, 5, 5, 0.0)  # given back: whole again
    assert attempt(gate, 401)[:4] == (True, 5, 4, 900.0)  # charged: as decided
    clock.advance(100)
    # Given back, the 401 still counted; the reset is the decision's (never cut short).
    assert attempt(gate, 200)[:4] == (True, 5, 4, 900.0)
    assert attempt(gate, 403)[:4] == (True, 5, 3, 900.0)
    assert limiter.peek("scope:login|user:alice", LOGIN).remaining == 3


@pytest.mark.parametrize("given", ["limit", "rate string"])
@pytest.mark.parametrize("algorithm", ["gcra", "token_bucket", "leaky_bucket"])
def test_a_give_back_brings_the_reset_of_a_refilling_limit_an_interval_nearer(
    algorithm: str, given: str
) -> None:
    """A limit that refills over time is whole again an interval (180 s) sooner for each
    unit given back; a rate string is read with the limiter's algorithm, as it decides it."""
    clock = FakeClock()
    limiter = Limiter(MemoryStore(clock=clock), algorithm=algorithm)
    limit = "5/15 minutes" if given == "rate string" else Limit(5, 900, algorithm)
    guesses = RateLimit(limit, key=keys.query("user"), scope="login", charge_statuses=FAILED)
    gate = Gate(limiter, [guesses])
    assert attempt(gate, 401)[:4] == (True, 5, 4, 180.0)
    assert attempt(gate, 200)[:4] == (True, 5, 4, 180.0)  # decided 3 left, 360 s
    assert attempt(gate, 403)[:4] == (True, 5, 3, 360.0)
    assert attempt(gate, 200)[:4] == (True, 5, 3, 360.0)


def test_a_give_back_leaves_a_window_s_reset_at_its_end() -> None:
    clock = FakeClock(60.0)
    limiter = Limiter(MemoryStore(clock=clock))
    gate = Gate(
        limiter, [RateLimit("5/15 minutes", key=keys.query("user"), charge_statuses=FAILED)]
    )
    assert attempt(gate, 401)[:4] == (True, 5, 4, 840.0)
    assert attempt(gate, 200)[:4] == (True, 5, 4, 840.0)


def test_a_give_back_the_store_refuses_is_told_as_counted(caplog: pytest.LogCaptureFixture) -> None:
    gate = Gate(Unrefunding(MemoryStore(clock=FakeClock())), [login_limit()])
    assert attempt(gate, 200)[:4] == (True, 5, 4, 900.0)
    assert attempt(gate, 200)[:4] == (True, 5, 3, 900.0)
    assert "could not give back" in caplog.text


def test_the_decorator_tells_only_its_refusals_which_see_every_give_back() -> None:
    """``Limiter.limit(charge_on=...)`` tells nothing of a call it admits; the decision a
    refusal carries is the store's, read after the calls before it gave their units back."""
    clock = FakeClock()
    limiter = Limiter(MemoryStore(clock=clock))

    class WrongPassword(Exception):
        pass

    @limiter.limit(LOGIN, key=lambda user, password: user, charge_on=WrongPassword)
    def log_in(user: str, password: str) -> str:
        if password != "right":
            raise WrongPassword
        return "session"

    assert [log_in("alice", "right") for _ in range(20)] == ["session"] * 20
    assert limiter.peek("alice", LOGIN)[:4] == (True, 5, 5, 0.0)
    for _ in range(5):
        with pytest.raises(WrongPassword):
            log_in("alice", "wrong")
    with pytest.raises(RateLimitExceeded) as refused:
        log_in("alice", "right")
    assert refused.value.decision[:5] == (False, 5, 0, 900.0, 900.0)


# -- ASGI: uvicorn --------------------------------------------------------------------------


def starlette_app(clock: FakeClock) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request as StarletteRequest
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from ratekeeper.web.asgi import RateLimitMiddleware

    async def login(request: StarletteRequest) -> PlainTextResponse:
        ok = request.query_params.get("password") == "right"
        return PlainTextResponse("welcome" if ok else "no", status_code=200 if ok else 401)

    app = Starlette(routes=[Route("/login", login, methods=["POST"])])
    decider = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(RateLimitMiddleware, decider=decider, limits=[login_limit()], ietf=True)
    return app


def fastapi_app(clock: FakeClock, *, router: bool) -> Any:
    """A login route whose wrong password raises ``HTTPException(401)``, limited by its own
    dependency or by its router's, under an app-wide limit that charges every request."""
    from fastapi import APIRouter, Depends, FastAPI, HTTPException

    from ratekeeper.web.fastapi import RateLimiter

    limiter = RateLimiter(AsyncLimiter(AsyncMemoryStore(clock=clock)), ietf=True)
    everything = RateLimit(Limit(100, 60, "sliding_log"))
    app = FastAPI(dependencies=[Depends(limiter.router_limit(everything, scope="app"))])
    limiter.install(app)
    logins = limiter.router_limit(login_limit(), scope="auth") if router else None
    auth = APIRouter(dependencies=[Depends(logins)] if logins else [])
    own = [] if router else [Depends(limiter.limit(login_limit()))]

    @auth.post("/login", dependencies=own)
    async def login(password: str) -> dict[str, str]:
        if password != "right":
            raise HTTPException(401, "wrong password")
        return {"welcome": "alice"}

    app.include_router(auth)
    return app


def django_urls(view: Callable[..., Any]) -> types.ModuleType:
    urls = types.ModuleType(f"outcome_headers_urls_{id(view)}")
    from django.urls import path

    urls.urlpatterns = [path("login", view, name="login")]  # type: ignore[attr-defined]
    return urls


def django_asgi_app(clock: FakeClock) -> tuple[Any, types.ModuleType]:
    from django.core.asgi import get_asgi_application
    from django.http import HttpResponse

    import tests.web.django_site  # noqa: F401  (Django's settings)
    from ratekeeper.web.django import RateLimiter

    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)), ietf=True)

    @limiter.limit(login_limit())
    async def login(request: Any) -> HttpResponse:
        await asyncio.sleep(0)
        ok = request.GET.get("password") == "right"
        return HttpResponse("welcome" if ok else "no", status=200 if ok else 401)

    return get_asgi_application(), django_urls(login)


@pytest.mark.parametrize("kind", ["asgi", "fastapi", "fastapi-router", "django-async"])
def test_asgi_adapters_tell_what_the_result_left(kind: str) -> None:
    from django.test import override_settings

    clock = FakeClock()
    if kind == "django-async":
        app, urls = django_asgi_app(clock)
        with (
            override_settings(ROOT_URLCONF=urls, MIDDLEWARE=[]),
            served(uvicorn_serving, app) as login,
        ):
            assert [login(password) for password in PASSWORDS] == EXPECTED
        return
    app = starlette_app(clock) if kind == "asgi" else fastapi_app(clock, router=kind != "fastapi")
    with served(uvicorn_serving, app) as login:
        assert [login(password) for password in PASSWORDS] == EXPECTED


# -- WSGI: waitress -------------------------------------------------------------------------


def wsgi_app(clock: FakeClock) -> Any:
    from ratekeeper.web.wsgi import RateLimitMiddleware

    def login(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        ok = "password=right" in environ.get("QUERY_STRING", "")
        start_response("200 OK" if ok else "401 Unauthorized", [("Content-Type", "text/plain")])
        return [b"welcome" if ok else b"no"]

    return RateLimitMiddleware(login, Limiter(MemoryStore(clock=clock)), [login_limit()], ietf=True)


def flask_app(clock: FakeClock, kind: str) -> Any:
    """A Flask login view limited by its decorator (``def`` or ``async def``) or by its
    blueprint's ``limit_views``."""
    import flask

    from ratekeeper.web.flask import RateLimiter

    app = flask.Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)), ietf=True)
    auth = flask.Blueprint("auth", __name__)
    if kind == "flask-blueprint":
        limiter.limit_views(auth, login_limit())

    def answer() -> tuple[str, int]:
        ok = flask.request.args.get("password") == "right"
        return ("welcome", 200) if ok else ("no", 401)

    if kind == "flask-async":

        @auth.post("/login")
        @limiter.limit(login_limit())
        async def login_async() -> tuple[str, int]:
            await asyncio.sleep(0)
            return answer()

    elif kind == "flask":
        auth.post("/login")(limiter.limit(login_limit())(answer))
    else:
        auth.post("/login")(answer)
    app.register_blueprint(auth)
    return app


@pytest.mark.parametrize("kind", ["wsgi", "flask", "flask-async", "flask-blueprint"])
def test_wsgi_adapters_tell_what_the_result_left(kind: str) -> None:
    clock = FakeClock()
    app = wsgi_app(clock) if kind == "wsgi" else flask_app(clock, kind)
    with served(waitress_serving, app) as login:
        assert [login(password) for password in PASSWORDS] == EXPECTED


# -- Django: its test client ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["decorator", "middleware"])
def test_django_tells_what_the_result_left(kind: str) -> None:
    from django.http import HttpResponse
    from django.test import Client, override_settings

    import tests.web.django_site  # noqa: F401  (Django's settings)
    from ratekeeper.web.django import RateLimiter

    decider = Limiter(MemoryStore(clock=FakeClock()))

    def login(request: Any) -> HttpResponse:
        ok = request.GET.get("password") == "right"
        return HttpResponse("welcome" if ok else "no", status=200 if ok else 401)

    settings: dict[str, Any] = {}
    if kind == "middleware":
        settings["MIDDLEWARE"] = ["ratekeeper.web.django.RateLimitMiddleware"]
        settings["RATEKEEPER"] = {
            "DECIDER": decider,
            "ROUTES": {"login": [login_limit()]},
            "OPTIONS": {"ietf": True},
        }
        view = login
    else:
        settings["MIDDLEWARE"] = []
        view = RateLimiter(decider, ietf=True).limit(login_limit())(login)
    with override_settings(ROOT_URLCONF=django_urls(view), **settings):
        client = Client()
        answers = [client.post(f"/login?user=alice&password={p}") for p in PASSWORDS]
    assert [told(answer.status_code, answer.headers) for answer in answers] == EXPECTED
