"""The applications of the web benchmarks (``web_suite``): one group per framework, each one
route built bare, once per limiter, and for reference with what a limiter cannot avoid.

Every limiter holds the same single limit, keyed by the client's address, fixed window, in
memory; the peers send the same rate-limit headers as ratekeeper (``headers_enabled=True``)
except django-ratelimit, which has none.

(No ``from __future__ import annotations`` here: FastAPI reads its endpoints' annotations, such
as ``request: Request``, as objects, and a string it cannot resolve becomes a query parameter.)
"""

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The limit of every timed row: one that no run reaches, so every request is admitted.
LIMIT = "1000000/minute"
#: ratekeeper's target: at least this many times less overhead than slowapi and Flask-Limiter.
TARGET = 3.0
#: The rate-limit headers every limiter but django-ratelimit sends on an admitted response.
HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")


@dataclass(frozen=True)
class Contender:
    """One application, bare or limited: ``build(limit)`` makes it (``limit`` is None for the
    bare one). ``refused`` is the status its limiter refuses with; ``note`` how it is set up.
    ``settle(app)`` waits out background work the limiter started (a storage's timer). A
    ``reference`` limits nothing: it shows what the framework charges any limiter of its kind.
    ``headers`` says it sends the rate-limit headers (``HEADERS``) on an admitted response.
    """

    name: str
    build: Callable[[str | None], Any]
    note: str = ""
    refused: int = 429
    peer: bool = False
    settle: Callable[[Any], None] | None = None
    reference: bool = False
    headers: bool = True


@dataclass(frozen=True)
class Comparison:
    """Ratios of the overhead of each of ``peers`` to that of the ratekeeper row ``ours``."""

    ours: str
    peers: tuple[str, ...]
    target: float | None = TARGET


@dataclass(frozen=True)
class Group:
    title: str
    kind: str  # "asgi" or "wsgi"
    bare: Contender
    limited: tuple[Contender, ...]
    comparisons: tuple[Comparison, ...]
    note: str = ""


def _join_timer(storage: Any) -> None:
    """Join the expiry timer of a ``limits`` MemoryStorage, if it is running."""
    timer = getattr(storage, "timer", None)
    if timer is not None and timer.is_alive():
        timer.join()


def _settle_slowapi(app: Any) -> None:
    """Join the expiry timer of the slowapi limiter on ``app``."""
    _join_timer(app.state.limiter._storage)


def starlette_group() -> Group:
    from slowapi import Limiter as SlowLimiter
    from slowapi import _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.middleware import SlowAPIASGIMiddleware, SlowAPIMiddleware
    from slowapi.util import get_remote_address
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from ratekeeper import AsyncLimiter
    from ratekeeper.web import RateLimit
    from ratekeeper.web.asgi import RateLimitMiddleware

    async def item(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    def bare(limit: str | None) -> Starlette:
        return Starlette(routes=[Route("/item", item)])

    def ratekeeper(limit: str | None) -> Starlette:
        app = bare(None)
        app.add_middleware(
            RateLimitMiddleware, decider=AsyncLimiter(), limits=[RateLimit(str(limit))]
        )
        return app

    def slowapi(middleware: type) -> Callable[[str | None], Starlette]:
        def build(limit: str | None) -> Starlette:
            app = bare(None)
            app.state.limiter = SlowLimiter(
                key_func=get_remote_address,
                default_limits=[str(limit)],
                headers_enabled=True,
                storage_uri="memory://",
            )
            app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]
            app.add_middleware(middleware)
            return app

        return build

    return Group(
        "ASGI middleware (Starlette)",
        "asgi",
        Contender("bare Starlette", bare, "one route, `PlainTextResponse('ok')`"),
        (
            Contender(
                "ratekeeper RateLimitMiddleware",
                ratekeeper,
                "`ratekeeper.web.asgi.RateLimitMiddleware`, `AsyncLimiter()` (memory, fixed "
                f'window), `[RateLimit("{LIMIT}")]` (keyed by client address)',
            ),
            Contender(
                "slowapi SlowAPIASGIMiddleware",
                slowapi(SlowAPIASGIMiddleware),
                f'`Limiter(key_func=get_remote_address, default_limits=["{LIMIT}"], '
                'headers_enabled=True, storage_uri="memory://")`, its pure ASGI middleware',
                peer=True,
                settle=_settle_slowapi,
            ),
            Contender(
                "slowapi SlowAPIMiddleware",
                slowapi(SlowAPIMiddleware),
                "the same limiter, its `BaseHTTPMiddleware` (the one its docs show first)",
                peer=True,
                settle=_settle_slowapi,
            ),
        ),
        (
            Comparison(
                "ratekeeper RateLimitMiddleware",
                ("slowapi SlowAPIASGIMiddleware", "slowapi SlowAPIMiddleware"),
            ),
        ),
    )


def fastapi_group() -> Group:
    from fastapi import Depends, FastAPI
    from slowapi import Limiter as SlowLimiter
    from slowapi import _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address
    from starlette.requests import Request
    from starlette.responses import Response as StarletteResponse

    from ratekeeper import AsyncLimiter
    from ratekeeper.web import RateLimit
    from ratekeeper.web.fastapi import RateLimiter

    def bare(limit: str | None) -> FastAPI:
        app = FastAPI()

        @app.get("/item")
        async def item() -> dict[str, str]:
            return {"item": "ok"}

        return app

    def ratekeeper(limit: str | None) -> FastAPI:
        app = FastAPI()
        limiter = RateLimiter(AsyncLimiter())
        limiter.install(app)

        @app.get("/item", dependencies=[Depends(limiter.limit(RateLimit(str(limit))))])
        async def item() -> dict[str, str]:
            return {"item": "ok"}

        return app

    async def nothing(request: Request, response: StarletteResponse) -> None:
        return None

    def no_op(limit: str | None) -> FastAPI:
        app = FastAPI()

        @app.get("/item", dependencies=[Depends(nothing)])
        async def item() -> dict[str, str]:
            return {"item": "ok"}

        return app

    def slowapi(limit: str | None) -> FastAPI:
        app = FastAPI()
        limiter = SlowLimiter(
            key_func=get_remote_address, headers_enabled=True, storage_uri="memory://"
        )
        app.state.limiter = limiter
        app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

        @app.get("/item")
        @limiter.limit(str(limit))
        async def item(request: Request, response: StarletteResponse) -> dict[str, str]:
            return {"item": "ok"}

        return app

    return Group(
        "Per-route limit (FastAPI)",
        "asgi",
        Contender("bare FastAPI", bare, "one route returning a dict (JSON)"),
        (
            Contender(
                "no-op dependency (reference)",
                no_op,
                "a dependency taking `request` and `response` that does nothing: FastAPI's "
                "own cost of any dependency, which ratekeeper's overhead includes",
                reference=True,
            ),
            Contender(
                "ratekeeper dependency",
                ratekeeper,
                "`Depends(RateLimiter(AsyncLimiter()).limit(RateLimit(...)))` on the route, "
                "`install(app)`",
            ),
            Contender(
                "slowapi @limiter.limit",
                slowapi,
                "`@limiter.limit(...)` on the route; its endpoint takes `request` and "
                "`response` as slowapi requires for headers",
                peer=True,
                settle=_settle_slowapi,
            ),
        ),
        (Comparison("ratekeeper dependency", ("slowapi @limiter.limit",)),),
    )


def flask_group() -> Group:
    import flask
    from flask_limiter import Limiter as FlaskLimiter
    from flask_limiter.util import get_remote_address

    from ratekeeper import Limiter
    from ratekeeper.web import RateLimit
    from ratekeeper.web.flask import RateLimiter
    from ratekeeper.web.wsgi import RateLimitMiddleware

    def app_with(decorate: Callable[[Any], Any] | None = None) -> flask.Flask:
        app = flask.Flask("bench")

        def item() -> str:
            return "ok"

        app.add_url_rule("/item", "item", decorate(item) if decorate else item)
        return app

    def bare(limit: str | None) -> flask.Flask:
        return app_with()

    def middleware(limit: str | None) -> flask.Flask:
        app = app_with()
        app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, Limiter(), [RateLimit(str(limit))]
        )
        return app

    def decorator(limit: str | None) -> flask.Flask:
        return app_with(RateLimiter(Limiter()).limit(RateLimit(str(limit))))

    def flask_limiter_default(limit: str | None) -> flask.Flask:
        app = app_with()
        app.extensions["bench"] = FlaskLimiter(
            get_remote_address,
            app=app,
            default_limits=[str(limit)],
            headers_enabled=True,
            storage_uri="memory://",
        )
        return app

    def flask_limiter_decorator(limit: str | None) -> flask.Flask:
        limiter = FlaskLimiter(get_remote_address, headers_enabled=True, storage_uri="memory://")
        app = app_with(limiter.limit(str(limit)))
        limiter.init_app(app)
        app.extensions["bench"] = limiter
        return app

    def settle(app: Any) -> None:
        _join_timer(app.extensions["bench"].storage)

    return Group(
        "WSGI middleware and per-route limit (Flask)",
        "wsgi",
        Contender("bare Flask", bare, "one view returning `'ok'`"),
        (
            Contender(
                "ratekeeper RateLimitMiddleware",
                middleware,
                "`app.wsgi_app = RateLimitMiddleware(app.wsgi_app, Limiter(), [RateLimit(...)])`",
            ),
            Contender(
                "ratekeeper @limiter.limit",
                decorator,
                "`RateLimiter(Limiter()).limit(RateLimit(...))` on the view",
            ),
            Contender(
                "Flask-Limiter default_limits",
                flask_limiter_default,
                '`Limiter(get_remote_address, app=app, default_limits=[...], headers_enabled=True, storage_uri="memory://")`',
                peer=True,
                settle=settle,
            ),
            Contender(
                "Flask-Limiter @limiter.limit",
                flask_limiter_decorator,
                "the same limiter without default limits, `@limiter.limit(...)` on the view",
                peer=True,
                settle=settle,
            ),
        ),
        (
            Comparison("ratekeeper RateLimitMiddleware", ("Flask-Limiter default_limits",)),
            Comparison("ratekeeper @limiter.limit", ("Flask-Limiter @limiter.limit",)),
        ),
    )


def django_group() -> Group:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DEBUG=False,
            SECRET_KEY="ratekeeper-benchmarks",
            ALLOWED_HOSTS=["*"],
            ROOT_URLCONF=__name__,
            MIDDLEWARE=[f"{__name__}.ChooseUrls"],
            INSTALLED_APPS=[],
            DATABASES={},
            USE_TZ=True,
            CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        )
        django.setup()
    from django.core.handlers.wsgi import WSGIHandler
    from django.http import HttpResponse
    from django.urls import path
    from django_ratelimit.decorators import ratelimit

    from ratekeeper import Limiter
    from ratekeeper.web import RateLimit
    from ratekeeper.web.django import RateLimiter
    from ratekeeper.web.wsgi import RateLimitMiddleware

    def item(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    def site(name: str, view: Callable[..., Any]) -> Callable[[dict[str, Any], Any], Any]:
        """A Django application whose one route is ``view``: every contender is the same
        handler, its own URL configuration chosen for each request by ``ChooseUrls``."""
        urls = types.ModuleType(f"bench_urls_{name}")
        urls.urlpatterns = [path("item", view)]  # type: ignore[attr-defined]
        handler = WSGIHandler()

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            environ["bench.urlconf"] = urls
            return handler(environ, start_response)

        return app

    def bare(limit: str | None) -> Any:
        return site("bare", item)

    def decorator(limit: str | None) -> Any:
        return site("ratekeeper", RateLimiter(Limiter()).limit(RateLimit(str(limit)))(item))

    def middleware(limit: str | None) -> Any:
        return RateLimitMiddleware(site("bare", item), Limiter(), [RateLimit(str(limit))])

    def django_ratelimit(limit: str | None) -> Any:
        from django.core.cache import cache

        cache.clear()
        rate = str(limit).replace("minute", "m")
        return site("ratelimit", ratelimit(key="ip", rate=rate, block=True)(item))

    return Group(
        "Per-route limit (Django), report only",
        "wsgi",
        Contender("bare Django", bare, "one view returning `HttpResponse('ok')`, no middleware"),
        (
            Contender(
                "ratekeeper @limiter.limit",
                decorator,
                "`RateLimiter(Limiter()).limit(RateLimit(...))` on the view",
            ),
            Contender(
                "ratekeeper RateLimitMiddleware",
                middleware,
                "the Django WSGI application wrapped in `ratekeeper.web.wsgi.RateLimitMiddleware`",
            ),
            Contender(
                "django-ratelimit @ratelimit",
                django_ratelimit,
                '`@ratelimit(key="ip", rate="1000000/m", block=True)` over a `LocMemCache`; '
                "it sends no rate-limit headers (ratekeeper does) and refuses with 403",
                refused=403,
                peer=True,
                headers=False,
            ),
        ),
        (Comparison("ratekeeper @limiter.limit", ("django-ratelimit @ratelimit",), target=None),),
    )


class ChooseUrls:
    """Django middleware of the benchmark's site: the URL configuration the environ names."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        request.urlconf = request.META["bench.urlconf"]
        return self.get_response(request)


#: An empty URL configuration: Django's default, every request choosing its own.
urlpatterns: list[Any] = []


GROUPS: tuple[Callable[[], Group], ...] = (
    starlette_group,
    fastapi_group,
    flask_group,
    django_group,
)
