"""A response to an HTTP error a view raises carries the rate-limit headers, in every adapter.

A login view fails with its framework's own error: Flask's ``abort(401)``, Django's
``PermissionDenied`` (403) or ``Http404``, FastAPI's ``HTTPException(401)``. The framework
answers it, through the app's error handler when it has one (Flask's ``errorhandler(401)``,
Django's ``handler403``, FastAPI's ``exception_handler``), whose body is kept, and that answer
carries the headers as a response the view returns does, whether the limit is the view's own,
its blueprint's, the settings' or the middleware's. Under a login limit of 5 charged by
outcome (``charge_statuses={401, 403}``), 3 good logins are given back and each says 5 left,
then failures say 4, 3, 2, 1, 0 and the next attempt is refused with ``Retry-After``; under a
plain limit of 5, every attempt counts. An exception that is no HTTP error is answered 500 by
the framework: Flask's 500 page carries the headers, Django's and Starlette's, made after the
exception has left the limit, do not. uvicorn serves the ASGI apps and waitress the WSGI ones;
Django's sync views are called through its test client. The clock is a ``FakeClock``.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from ratekeeper import AsyncLimiter, AsyncMemoryStore, Limit, Limiter, MemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit, keys
from tests.web.servers import uvicorn_serving, waitress_serving
from tests.web.told import Told, told

LOGIN = Limit(5, 900, "sliding_log")
PASSWORDS = ["right"] * 3 + ["wrong"] * 6
#: What the logins of ``PASSWORDS`` tell, given the status of a wrong password's answer.
Expected = Callable[[int], list[Told]]


def charged_expected(failed: int) -> list[Told]:
    """Good logins given back, then failures charged, then refusals."""
    return (
        [(200, "5", "5", "0", None, '"default";r=5;t=0')] * 3
        + [(failed, "5", str(n), "900", None, f'"default";r={n};t=900') for n in (4, 3, 2, 1, 0)]
        + [(429, "5", "0", "900", "900", '"default";r=0;t=900')]
    )


def plain_expected(failed: int) -> list[Told]:
    """Every attempt counted, whatever it came to."""
    return (
        [(200, "5", str(n), "900", None, f'"default";r={n};t=900') for n in (4, 3, 2)]
        + [(failed, "5", str(n), "900", None, f'"default";r={n};t=900') for n in (1, 0)]
        + [(429, "5", "0", "900", "900", '"default";r=0;t=900')] * 4
    )


EXPECTED: dict[str, Expected] = {"charged": charged_expected, "plain": plain_expected}


def login_limit(charging: str) -> RateLimit:
    statuses = {401, 403} if charging == "charged" else None
    return RateLimit(LOGIN, key=keys.query("user"), scope="login", charge_statuses=statuses)


Answer = tuple[Told, str]


@contextmanager
def served(serving: Callable[[Any], Any], app: Any) -> Iterator[Callable[[str], Answer]]:
    """``app`` on a real server: a login with a password, what its answer told, and its body."""
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as session:

        def login(password: str) -> Answer:
            answer = session.post(f"/login?user=alice&password={password}")
            return told(answer.status_code, answer.headers), answer.text

        yield login


def check(answers: list[Answer], expected: list[Told], failed: int, body: str) -> None:
    """``answers`` told ``expected``; each failure's body holds ``body``."""
    assert [told for told, _ in answers] == expected
    failures = [text for (told, text) in answers if told[0] == failed]
    assert failures and all(body in text for text in failures), failures


# -- Flask: waitress ------------------------------------------------------------------------


def flask_app(clock: FakeClock, kind: str, charging: str, handler: bool) -> Any:
    """A login view failing with ``abort(401)``, limited by its decorator (``def`` or ``async
    def``), by its blueprint's ``limit_views`` or by the WSGI middleware; with the app's own
    401 page or Werkzeug's."""
    import flask

    from ratekeeper.web.flask import RateLimiter
    from ratekeeper.web.wsgi import RateLimitMiddleware

    app = flask.Flask(__name__)
    decider = Limiter(MemoryStore(clock=clock))
    limiter = RateLimiter(decider, ietf=True)
    auth = flask.Blueprint("auth", __name__)
    if handler:
        app.register_error_handler(401, lambda error: ("custom 401", 401))
    if kind == "blueprint":
        limiter.limit_views(auth, login_limit(charging))

    def answer() -> str:
        if flask.request.args.get("password") != "right":
            flask.abort(401)
        return "welcome"

    async def answer_async() -> str:
        await asyncio.sleep(0)
        return answer()

    if kind in ("blueprint", "wsgi"):
        auth.post("/login")(answer)
    else:
        view = answer_async if kind == "async" else answer
        auth.post("/login")(limiter.limit(login_limit(charging))(view))
    app.register_blueprint(auth)
    if kind == "wsgi":
        return RateLimitMiddleware(app, decider, [login_limit(charging)], ietf=True)
    return app


@pytest.mark.parametrize("charging", ["charged", "plain"])
@pytest.mark.parametrize(
    ("kind", "handler"),
    [("sync", False), ("async", False), ("sync", True), ("blueprint", True), ("wsgi", True)],
)
def test_flask_error_answers_carry_the_headers(kind: str, handler: bool, charging: str) -> None:
    app = flask_app(FakeClock(), kind, charging, handler)
    with served(waitress_serving, app) as login:
        answers = [login(password) for password in PASSWORDS]
    body = "custom 401" if handler else "401 Unauthorized"
    check(answers, EXPECTED[charging](401), 401, body)


# -- Django: its test client, and uvicorn ---------------------------------------------------


def django_site(limit: RateLimit, *, decorated: str) -> tuple[types.ModuleType, Any]:
    """A URLconf whose login view raises ``PermissionDenied`` on a wrong password under a
    limit charged by outcome, else ``Http404``, with its own ``handler403`` and
    ``handler404``; the view decorated (``"sync"``, ``"async"``) or not (``""``); and the
    decider."""
    from django.core.exceptions import PermissionDenied
    from django.http import Http404, HttpResponse, HttpResponseForbidden, HttpResponseNotFound
    from django.urls import path

    import tests.web.django_site  # noqa: F401  (Django's settings)
    from ratekeeper.web.django import RateLimiter

    decider = Limiter(MemoryStore(clock=FakeClock()))
    failure = PermissionDenied if limit.judge is not None else Http404

    def login(request: Any) -> HttpResponse:
        if request.GET.get("password") != "right":
            raise failure("wrong password")
        return HttpResponse("welcome")

    async def login_async(request: Any) -> HttpResponse:
        await asyncio.sleep(0)
        return login(request)

    view: Any = login_async if decorated == "async" else login
    if decorated:
        view = RateLimiter(decider, ietf=True).limit(limit)(view)
    urls = types.ModuleType(f"error_headers_urls_{id(view)}")
    urls.urlpatterns = [path("login", view, name="login")]  # type: ignore[attr-defined]
    urls.handler403 = lambda request, exception: HttpResponseForbidden("custom 403")  # type: ignore[attr-defined]
    urls.handler404 = lambda request, exception: HttpResponseNotFound("custom 404")  # type: ignore[attr-defined]
    return urls, decider


@pytest.mark.parametrize("charging", ["charged", "plain"])
@pytest.mark.parametrize("kind", ["decorator", "async", "middleware"])
def test_django_error_answers_carry_the_headers(kind: str, charging: str) -> None:
    from django.core.asgi import get_asgi_application
    from django.test import Client, override_settings

    limit = login_limit(charging)
    decorated = {"decorator": "sync", "async": "async", "middleware": ""}[kind]
    urls, decider = django_site(limit, decorated=decorated)
    settings: dict[str, Any] = {"ROOT_URLCONF": urls, "MIDDLEWARE": []}
    if kind == "middleware":
        settings["MIDDLEWARE"] = ["ratekeeper.web.django.RateLimitMiddleware"]
        settings["RATEKEEPER"] = {
            "DECIDER": decider,
            "ROUTES": {"login": [limit]},
            "OPTIONS": {"ietf": True},
        }
    failed, body = (403, "custom 403") if charging == "charged" else (404, "custom 404")
    with override_settings(**settings):
        if kind == "async":
            with served(uvicorn_serving, get_asgi_application()) as login:
                answers = [login(password) for password in PASSWORDS]
        else:
            client = Client()
            posted = [client.post(f"/login?user=alice&password={p}") for p in PASSWORDS]
            answers = [(told(a.status_code, a.headers), a.content.decode()) for a in posted]
    check(answers, EXPECTED[charging](failed), failed, body)


# -- FastAPI: uvicorn -----------------------------------------------------------------------


def fastapi_app(clock: FakeClock, kind: str, charging: str, handler: bool) -> Any:
    """A login route whose wrong password raises ``HTTPException(401)``, limited by its own
    dependency or by the ASGI middleware; answered by FastAPI's handler or by the app's own."""
    from fastapi import Depends, FastAPI, HTTPException
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.responses import PlainTextResponse

    from ratekeeper.web.asgi import RateLimitMiddleware
    from ratekeeper.web.fastapi import RateLimiter

    decider = AsyncLimiter(AsyncMemoryStore(clock=clock))
    limiter = RateLimiter(decider, ietf=True)
    app = FastAPI()
    limiter.install(app)
    own = [Depends(limiter.limit(login_limit(charging)))] if kind == "route" else []
    if kind == "asgi":
        limits = [login_limit(charging)]
        app.add_middleware(RateLimitMiddleware, decider=decider, limits=limits, ietf=True)
    if handler:

        async def own_page(request: Any, error: Exception) -> PlainTextResponse:
            return PlainTextResponse("custom 401", status_code=401)

        app.add_exception_handler(StarletteHTTPException, own_page)

    @app.post("/login", dependencies=own)
    async def login(password: str) -> dict[str, str]:
        if password != "right":
            raise HTTPException(401, "wrong password")
        return {"welcome": "alice"}

    return app


@pytest.mark.parametrize("charging", ["charged", "plain"])
@pytest.mark.parametrize(("kind", "handler"), [("route", False), ("route", True), ("asgi", True)])
def test_fastapi_error_answers_carry_the_headers(kind: str, handler: bool, charging: str) -> None:
    with served(uvicorn_serving, fastapi_app(FakeClock(), kind, charging, handler)) as login:
        answers = [login(password) for password in PASSWORDS]
    body = "custom 401" if handler else '{"detail":"wrong password"}'
    check(answers, EXPECTED[charging](401), 401, body)


# -- An exception that is no HTTP error -----------------------------------------------------


def test_flask_s_500_page_carries_the_headers() -> None:
    import flask

    from ratekeeper.web.flask import RateLimiter

    app = flask.Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=FakeClock())))

    @app.post("/login")
    @limiter.limit(login_limit("plain"))
    def login() -> str:
        raise RuntimeError("the view failed")

    with served(waitress_serving, app) as log_in:
        answers = [log_in("right")[0][:4] for _ in range(2)]
    assert answers == [(500, "5", "4", "900"), (500, "5", "3", "900")]


def test_django_s_500_page_is_made_after_the_exception_left_the_decorator() -> None:
    from django.test import Client, override_settings
    from django.urls import path

    import tests.web.django_site  # noqa: F401  (Django's settings)
    from ratekeeper.web.django import RateLimiter

    limiter = RateLimiter(Limiter(MemoryStore(clock=FakeClock())))

    @limiter.limit(login_limit("charged"))
    def login(request: Any) -> Any:
        raise RuntimeError("the view failed")

    urls = types.ModuleType("error_headers_500_urls")
    urls.urlpatterns = [path("login", login)]  # type: ignore[attr-defined]
    with override_settings(ROOT_URLCONF=urls, MIDDLEWARE=[]):
        client = Client(raise_request_exception=False)
        answers = [client.post("/login?user=alice&password=right") for _ in range(7)]
    assert [answer.status_code for answer in answers] == [500] * 7  # given back: never refused
    assert "X-RateLimit-Limit" not in answers[0].headers


def test_starlette_s_500_page_is_made_outside_fastapi_s_limits() -> None:
    from fastapi import Depends, FastAPI

    from ratekeeper.web.fastapi import RateLimiter

    limiter = RateLimiter(AsyncLimiter(AsyncMemoryStore(clock=FakeClock())))
    app = FastAPI()
    limiter.install(app)

    @app.post("/login", dependencies=[Depends(limiter.limit(login_limit("plain")))])
    async def login() -> dict[str, str]:
        raise RuntimeError("the route failed")

    with uvicorn_serving(app) as url:  # a connection per request: uvicorn closes one that failed
        posted = [httpx.post(f"{url}/login?user=alice", timeout=30) for _ in range(6)]
    answers = [(answer.status_code, answer.headers.get("X-RateLimit-Limit")) for answer in posted]
    assert answers == [(500, None)] * 5 + [(429, "5")]
