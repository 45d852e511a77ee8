"""Real servers over loopback, many clients at once: exactly the limit is admitted.

uvicorn serves a Starlette app behind the ASGI middleware, a FastAPI router's limit and an async
Django view; waitress a Flask app behind the WSGI middleware, an async Flask view and a
blueprint's limit. 16 client threads send 200 requests against a limit of 50 (an exact sliding
log over a day, so no window edge can pass more).
"""

from __future__ import annotations

import asyncio
import threading
import types
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ratekeeper import AsyncLimiter, Limit, Limiter
from ratekeeper.web import RateLimit
from tests.web.servers import uvicorn_serving, waitress_serving

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


def test_waitress_admits_exactly_the_limit_to_an_async_flask_view() -> None:
    from flask import Flask

    from ratekeeper.web.flask import RateLimiter

    app = Flask(__name__)
    limiter = RateLimiter(Limiter())

    @app.get("/")
    @limiter.limit(RateLimit(LIMIT))
    async def home() -> str:
        await asyncio.sleep(0)
        return "ok"

    with waitress_serving(app) as url:
        statuses = hammer(url + "/")
    assert statuses == {200: 50, 429: 150}


def test_waitress_admits_exactly_the_limit_to_a_flask_blueprint() -> None:
    from flask import Blueprint, Flask

    from ratekeeper.web.flask import RateLimiter

    app = Flask(__name__)
    api = Blueprint("api", __name__)
    RateLimiter(Limiter()).limit_views(api, RateLimit(LIMIT))
    api.add_url_rule("/", "home", lambda: "ok")
    app.register_blueprint(api)
    with waitress_serving(app) as url:
        statuses = hammer(url + "/")
    assert statuses == {200: 50, 429: 150}


def test_uvicorn_admits_exactly_the_limit_to_an_async_django_view() -> None:
    from django.core.asgi import get_asgi_application
    from django.http import HttpRequest, HttpResponse
    from django.test import override_settings
    from django.urls import path

    import tests.web.django_site  # noqa: F401  (Django's settings)
    from ratekeeper.web.django import RateLimiter

    limiter = RateLimiter(Limiter())

    @limiter.limit(RateLimit(LIMIT))
    async def home(request: HttpRequest) -> HttpResponse:
        await asyncio.sleep(0)
        return HttpResponse("ok")

    urls = types.ModuleType("async_django_urls")
    urls.urlpatterns = [path("", home)]  # type: ignore[attr-defined]
    with (
        override_settings(ROOT_URLCONF=urls, MIDDLEWARE=[]),
        uvicorn_serving(get_asgi_application()) as url,
    ):
        statuses = hammer(url + "/")
    assert statuses == {200: 50, 429: 150}


def test_uvicorn_admits_exactly_the_limit_to_a_fastapi_router() -> None:
    from fastapi import APIRouter, Depends, FastAPI

    from ratekeeper.web.fastapi import RateLimiter

    limiter = RateLimiter(AsyncLimiter())
    api = APIRouter(dependencies=[Depends(limiter.router_limit(RateLimit(LIMIT), scope="api"))])

    @api.get("/")
    async def home() -> str:
        return "ok"

    app = FastAPI()
    limiter.install(app)
    app.include_router(api)
    with uvicorn_serving(app) as url:
        statuses = hammer(url + "/")
    assert statuses == {200: 50, 429: 150}
