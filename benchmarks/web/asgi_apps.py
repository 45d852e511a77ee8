"""The ASGI groups of the web benchmarks: Starlette (middleware) and FastAPI (dependency).

(No ``from __future__ import annotations`` here: FastAPI reads its endpoints' annotations, such
as ``request: Request``, as objects, and a string it cannot resolve becomes a query parameter.)
"""

from collections.abc import Callable
from typing import Any

from benchmarks.web.groups import LIMIT, Comparison, Contender, Group, join_timer


def _settle_slowapi(app: Any) -> None:
    """Join the expiry timer of the slowapi limiter on ``app``."""
    join_timer(app.state.limiter._storage)


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
