"""Limits charged by outcome: a login limit that counts failed logins only, in every adapter
and decorator, on memory and on Redis. Each attempt is counted before its handler runs, so
10 wrong passwords at once against a limit of 5 admit exactly 5; a right password is given
back, so 20 good logins in a row are never refused."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI, HTTPException

from ratekeeper import AsyncLimiter, Limiter, RateLimitExceeded
from ratekeeper.stores import open_async_store, open_store
from ratekeeper.web import HandlerResult, RateLimit, keys
from ratekeeper.web.asgi import RateLimitMiddleware as ASGIMiddleware
from ratekeeper.web.wsgi import RateLimitMiddleware as WSGIMiddleware

PARALLEL = 10
_prefixes = itertools.count()


@pytest.fixture(params=["memory", "redis"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return "memory://"
    server = request.getfixturevalue("redis_server")
    return f"{server.url}?prefix=outcome{next(_prefixes)}"


def login_limit() -> RateLimit:
    return RateLimit(
        "5/15 minutes", key=keys.query("user"), scope="login", charge_statuses={401, 403}
    )


def parallel(call: Callable[[], int]) -> list[int]:
    """``call`` from PARALLEL threads released together; the statuses, sorted."""
    start = threading.Barrier(PARALLEL)

    def one() -> int:
        start.wait()
        return call()

    with ThreadPoolExecutor(PARALLEL) as pool:
        return sorted(pool.map(lambda _: one(), range(PARALLEL)))


# -- WSGI, Flask, Django: threads ------------------------------------------------------------


def wsgi_login(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    ok = "password=right" in environ.get("QUERY_STRING", "")
    start_response("200 OK" if ok else "401 Unauthorized", [("Content-Type", "text/plain")])
    return [b"welcome" if ok else b"no"]


def flask_app(limiter: Limiter) -> Any:
    import flask

    from ratekeeper.web.flask import RateLimiter

    app = flask.Flask(__name__)
    limits = RateLimiter(limiter)

    @app.post("/login")
    @limits.limit(login_limit())
    def login() -> Any:
        if flask.request.args.get("password") != "right":
            flask.abort(401)  # an exception carrying its status
        return "welcome"

    return app


def django_view(limiter: Limiter) -> Callable[..., Any]:
    from django.http import HttpResponse

    from ratekeeper.web.django import RateLimiter
    from tests.web import django_site  # noqa: F401  (configures Django)

    @RateLimiter(limiter).limit(login_limit())
    def login(request: Any) -> Any:
        ok = request.GET.get("password") == "right"
        return HttpResponse("welcome" if ok else "no", status=200 if ok else 401)

    return login


def sync_caller(kind: str, limiter: Limiter) -> Callable[[str], int]:
    """A login with a password, as each sync adapter is called; its status."""
    if kind == "wsgi":
        from werkzeug.test import Client

        app = WSGIMiddleware(wsgi_login, limiter, [login_limit()])
        return lambda password: (
            Client(app).post(f"/login?user=alice&password={password}").status_code
        )
    if kind == "flask":
        app = flask_app(limiter)
        return lambda password: (
            app.test_client().post(f"/login?user=alice&password={password}").status_code
        )
    from django.test import RequestFactory

    view = django_view(limiter)
    factory = RequestFactory()
    return lambda password: int(
        view(factory.post(f"/login?user=alice&password={password}")).status_code
    )


@pytest.mark.parametrize("kind", ["wsgi", "flask", "django"])
def test_sync_adapters_charge_failed_logins_only(kind: str, url: str) -> None:
    limiter = Limiter(open_store(url))
    login = sync_caller(kind, limiter)
    assert [login("right") for _ in range(20)] == [200] * 20
    assert parallel(lambda: login("wrong")) == [401] * 5 + [429] * 5
    assert login("right") == 429  # the account is closed to guesses for now
    limiter.close()


# -- ASGI and FastAPI: tasks -----------------------------------------------------------------


async def asgi_login(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await asyncio.sleep(0.001)  # the handler takes a while: the others are counted meanwhile
    ok = b"password=right" in scope.get("query_string", b"")
    await send({"type": "http.response.start", "status": 200 if ok else 401, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def fastapi_app(limiter: AsyncLimiter) -> FastAPI:
    from ratekeeper.web.fastapi import RateLimiter

    app = FastAPI()
    limits = RateLimiter(limiter)
    limits.install(app)

    @app.post("/login", dependencies=[Depends(limits.limit(login_limit()))])
    async def login(password: str) -> dict[str, str]:
        await asyncio.sleep(0.001)
        if password != "right":
            raise HTTPException(401, "wrong password")
        return {"welcome": "alice"}

    return app


@pytest.mark.parametrize("kind", ["asgi", "fastapi"])
def test_async_adapters_charge_failed_logins_only(kind: str, url: str) -> None:
    async def main() -> None:
        limiter = AsyncLimiter(open_async_store(url))
        app: Any = (
            ASGIMiddleware(asgi_login, decider=limiter, limits=[login_limit()])
            if kind == "asgi"
            else fastapi_app(limiter)
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as session:

            async def login(password: str) -> int:
                answer = await session.post(f"/login?user=alice&password={password}")
                return answer.status_code

            assert [await login("right") for _ in range(20)] == [200] * 20
            statuses = await asyncio.gather(*(login("wrong") for _ in range(PARALLEL)))
            assert sorted(statuses) == [401] * 5 + [429] * 5
            assert await login("right") == 429
        await limiter.close()

    asyncio.run(main())


# -- The decorators ---------------------------------------------------------------------------


class WrongPassword(Exception):
    pass


def test_the_sync_decorator_charges_what_it_is_told(url: str) -> None:
    limiter = Limiter(open_store(url))
    held = threading.Event()

    @limiter.limit("5/15 minutes", key=lambda user, password: user, charge_on=WrongPassword)
    def login(user: str, password: str) -> str:
        if password == "wrong":
            held.wait(5)  # every admitted guess stays in flight until the others are decided
        if password != "right":
            raise WrongPassword
        return "session"

    assert [login("alice", "right") for _ in range(20)] == ["session"] * 20

    def guess() -> str:
        try:
            return login("alice", "wrong")
        except WrongPassword:
            return "wrong"
        except RateLimitExceeded:
            return "refused"

    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = [pool.submit(guess) for _ in range(PARALLEL)]
        while sum(future.done() for future in futures) < 5:  # the refused ones
            threading.Event().wait(0.001)
        held.set()
    assert sorted(future.result() for future in futures) == ["refused"] * 5 + ["wrong"] * 5
    with pytest.raises(RateLimitExceeded):
        login("alice", "right")
    limiter.close()


def test_the_async_decorator_charges_by_result(url: str) -> None:
    async def main() -> None:
        limiter = AsyncLimiter(open_async_store(url))

        @limiter.limit("5/15 minutes", key=lambda user, password: user, charge_when=lambda r: not r)
        async def login(user: str, password: str) -> bool:
            await asyncio.sleep(0.001)
            return password == "right"

        assert [await login("alice", "right") for _ in range(20)] == [True] * 20

        async def guess() -> str:
            try:
                return str(await login("alice", "wrong"))
            except RateLimitExceeded:
                return "refused"

        outcomes = await asyncio.gather(*(guess() for _ in range(PARALLEL)))
        assert sorted(outcomes) == ["False"] * 5 + ["refused"] * 5
        with pytest.raises(RateLimitExceeded):
            await login("alice", "right")
        await limiter.close()

    asyncio.run(main())


# -- Options ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"charge_statuses": {401}, "charge_when": lambda r: True}, ValueError),
        ({"charge_statuses": set()}, ValueError),
        ({"charge_statuses": {99}}, ValueError),
        ({"charge_statuses": {True}}, ValueError),
        ({"charge_statuses": "401"}, TypeError),
        ({"charge_when": 401}, TypeError),
        ({"charge_statuses": {401}, "shadow": True}, ValueError),
    ],
)
def test_bad_options_are_refused_when_the_limit_is_built(
    options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        RateLimit("5/minute", **options)


@pytest.mark.parametrize(
    "options",
    [{"charge_on": ValueError()}, {"charge_on": ()}, {"charge_on": (int,)}, {"charge_when": 3}],
)
def test_bad_decorator_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        Limiter().limit("5/minute", **options)


def test_a_decider_that_cannot_give_back_is_refused() -> None:
    from ratekeeper import Engine
    from ratekeeper.web import Gate

    with pytest.raises(TypeError, match="gives back"):
        Gate(Engine(), [login_limit()])


def test_a_result_is_what_charge_when_sees() -> None:
    limit = RateLimit("5/minute", charge_when=lambda result: result.error is not None)
    assert limit.judge is not None
    assert limit.judge(HandlerResult(500, KeyError()))
    assert not limit.judge(HandlerResult(401))
