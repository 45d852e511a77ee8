"""What ratekeeper's web integrations add to a request, against the bare application and peers.

Each group is one small application (Starlette, FastAPI, Flask, Django) with one route, built
bare and once per limiter, every limiter holding the same single limit (``LIMIT``, fixed window,
keyed by the client's address, in memory) so that every timed request is admitted. Requests
are made in-process, with no socket: an ASGI application is awaited with a prepared scope and
a ``receive`` and ``send`` that do nothing, a WSGI application is called with a prepared
environ and a ``start_response`` that does nothing, and its body is iterated and closed as a
server would. The scope or environ is copied for each request, as a server builds a new one.

*Overhead* is a limiter's time per request less the bare application's, measured in the same
run; the ratio ``peer overhead / ratekeeper overhead`` is the figure that counts (target: at
least ``TARGET``x against slowapi and Flask-Limiter). Every limiter sends the same rate-limit
headers (the peers with ``headers_enabled=True``), except django-ratelimit, which has none.

Before anything is timed, every limiter is built again with a tiny limit (``TINY``) and must
refuse the third request, so that no row times a limiter that does not limit; around every
measurement a request must be admitted, so that none times the refusal.
"""

import asyncio
import gc
import io
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

from benchmarks import report
from benchmarks.report import Output

#: The limit of every timed row: one that no run reaches, so every request is admitted.
LIMIT = "1000000/minute"
#: The limit of the sanity pass: the third request within a minute must be refused.
TINY = "2/minute"
#: ratekeeper's target: at least this many times less overhead than slowapi and Flask-Limiter.
TARGET = 3.0

#: The peers' packages, for the versions in the header.
PEER_PACKAGES = ("starlette", "fastapi", "slowapi", "flask", "flask-limiter", "django")
PEER_PACKAGES += ("django-ratelimit", "limits")


@dataclass(frozen=True)
class WebSizes:
    requests: int = 20_000
    repeats: int = 7


WEB_QUICK = WebSizes(requests=2_000, repeats=2)


class BenchmarkError(RuntimeError):
    """A limiter does not limit, or refuses a request it should admit."""


# -- driving an application in-process -----------------------------------------------------------

SCOPE: dict[str, Any] = {
    "type": "http",
    "asgi": {"version": "3.0", "spec_version": "2.4"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/item",
    "raw_path": b"/item",
    "root_path": "",
    "query_string": b"",
    "headers": [
        (b"host", b"testserver"),
        (b"user-agent", b"bench/1.0"),
        (b"accept", b"*/*"),
    ],
    "client": ("127.0.0.1", 50000),
    "server": ("127.0.0.1", 8000),
}

ENVIRON: dict[str, Any] = {
    "REQUEST_METHOD": "GET",
    "SCRIPT_NAME": "",
    "PATH_INFO": "/item",
    "QUERY_STRING": "",
    "SERVER_NAME": "testserver",
    "SERVER_PORT": "80",
    "SERVER_PROTOCOL": "HTTP/1.1",
    "REMOTE_ADDR": "127.0.0.1",
    "REMOTE_PORT": "50000",
    "HTTP_HOST": "testserver",
    "HTTP_USER_AGENT": "bench/1.0",
    "HTTP_ACCEPT": "*/*",
    "wsgi.version": (1, 0),
    "wsgi.url_scheme": "http",
    "wsgi.input": io.BytesIO(b""),
    "wsgi.errors": sys.stderr,
    "wsgi.multithread": False,
    "wsgi.multiprocess": False,
    "wsgi.run_once": False,
}

_REQUEST = {"type": "http.request", "body": b"", "more_body": False}


async def _receive() -> dict[str, Any]:
    return _REQUEST


async def _discard(message: Any) -> None:
    return None


def _ignore(status: str, headers: list[tuple[str, str]], *info: Any) -> Callable[[bytes], None]:
    return _write


def _write(data: bytes) -> None:
    return None


@dataclass
class Response:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)


def asgi_timer(app: Any, runner: asyncio.Runner) -> Callable[[int], float]:
    """Seconds that ``requests`` requests to ``app`` take, timed inside the event loop."""

    async def loop(requests: int) -> float:
        scope, receive, send = SCOPE, _receive, _discard
        start = time.perf_counter()
        for _ in range(requests):
            await app(dict(scope), receive, send)
        return time.perf_counter() - start

    return lambda requests: runner.run(loop(requests))


def asgi_probe(app: Any, runner: asyncio.Runner) -> Callable[[], Response]:
    """One request to ``app``: its status and headers."""

    async def probe() -> Response:
        response = Response()

        async def send(message: Any) -> None:
            if message["type"] == "http.response.start":
                response.status = message["status"]
                response.headers = {
                    n.decode("latin-1").lower(): v.decode("latin-1")
                    for n, v in message.get("headers", ())
                }

        await app(dict(SCOPE), _receive, send)
        return response

    return lambda: runner.run(probe())


def wsgi_timer(app: Any) -> Callable[[int], float]:
    """Seconds that ``requests`` requests to the WSGI ``app`` take."""

    def loop(requests: int) -> float:
        environ, start_response = ENVIRON, _ignore
        start = time.perf_counter()
        for _ in range(requests):
            body = app(dict(environ), start_response)
            for _chunk in body:
                pass
            close = getattr(body, "close", None)
            if close is not None:
                close()
        return time.perf_counter() - start

    return loop


def wsgi_probe(app: Any) -> Callable[[], Response]:
    """One request to the WSGI ``app``: its status and headers."""

    def probe() -> Response:
        response = Response()

        def start_response(status: str, headers: list[tuple[str, str]], *info: Any) -> Any:
            response.status = int(status.split(maxsplit=1)[0])
            response.headers = {n.lower(): v for n, v in headers}
            return _write

        body = app(dict(ENVIRON), start_response)
        for _chunk in body:
            pass
        close = getattr(body, "close", None)
        if close is not None:
            close()
        return response

    return probe


# -- the applications ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    """One application, bare or limited: ``build(limit)`` makes it (``limit`` is None for the
    bare one). ``refused`` is the status its limiter refuses with; ``note`` how it is set up.
    ``settle(app)`` waits out background work the limiter started (a storage's timer)."""

    name: str
    build: Callable[[str | None], Any]
    note: str = ""
    refused: int = 429
    peer: bool = False
    settle: Callable[[Any], None] | None = None


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

    def settle(app: Any) -> None:
        _join_timer(app.state.limiter._storage)

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
                settle=settle,
            ),
            Contender(
                "slowapi SlowAPIMiddleware",
                slowapi(SlowAPIMiddleware),
                "the same limiter, its `BaseHTTPMiddleware` (the one its docs show first)",
                peer=True,
                settle=settle,
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

    def settle(app: Any) -> None:
        _join_timer(app.state.limiter._storage)

    return Group(
        "Per-route limit (FastAPI)",
        "asgi",
        Contender("bare FastAPI", bare, "one route returning a dict (JSON)"),
        (
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
                settle=settle,
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


# -- running ------------------------------------------------------------------------------------


@dataclass
class Built:
    contender: Contender
    app: Any
    time: Callable[[int], float]
    probe: Callable[[], Response]


def _build(group: Group, contender: Contender, limit: str | None, runner: asyncio.Runner) -> Built:
    app = contender.build(limit)
    if group.kind == "asgi":
        return Built(contender, app, asgi_timer(app, runner), asgi_probe(app, runner))
    return Built(contender, app, wsgi_timer(app), wsgi_probe(app))


def check_limits(group: Group, runner: asyncio.Runner) -> dict[str, list[str]]:
    """Every limiter of ``group``, built with ``TINY``, admits two requests and refuses the
    third; return the rate-limit headers each admitted response carried."""
    headers: dict[str, list[str]] = {}
    for contender in group.limited:
        built = _build(group, contender, TINY, runner)
        statuses = [built.probe() for _ in range(3)]
        codes = [response.status for response in statuses]
        if codes != [200, 200, contender.refused]:
            raise BenchmarkError(
                f"{contender.name} does not limit: {TINY} answered {codes}, "
                f"not [200, 200, {contender.refused}]"
            )
        headers[contender.name] = sorted(
            name for name in statuses[0].headers if "ratelimit" in name
        )
        if contender.settle is not None:
            contender.settle(built.app)
    return headers


def measure(group: Group, sizes: WebSizes, runner: asyncio.Runner, out: Output) -> dict[str, float]:
    """Microseconds per request of each application of ``group``: the best of the repeats,
    the applications taking turns repeat by repeat."""
    built = [_build(group, c, None if c is group.bare else LIMIT, runner) for c in _all(group)]
    for one in built:  # warm up: imports, caches, the first window
        one.time(max(sizes.requests // 10, 10))
        _admitted(one)
    best = {one.contender.name: float("inf") for one in built}
    for repeat in range(sizes.repeats):
        out.progress(f"{group.title}: repeat {repeat + 1} of {sizes.repeats}")
        for one in built:
            gc.collect()
            gc.disable()
            try:
                seconds = one.time(sizes.requests)
            finally:
                gc.enable()
            if one.contender.settle is not None:
                one.contender.settle(one.app)
            _admitted(one)
            best[one.contender.name] = min(best[one.contender.name], seconds / sizes.requests * 1e6)
    return best


def _all(group: Group) -> list[Contender]:
    return [group.bare, *group.limited]


def _admitted(one: Built) -> None:
    status = one.probe().status
    if status != 200:
        raise BenchmarkError(f"{one.contender.name} answered {status} on the allow path")


Ratio = tuple[str, float | None, float | None]


def table(group: Group, best: dict[str, float]) -> tuple[list[str], list[Ratio]]:
    """The markdown table of one group, and its ratios: (comparison, ratio, target)."""
    bare = best[group.bare.name]
    overhead = {name: value - bare for name, value in best.items()}
    ratios: dict[str, str] = {}
    found: list[Ratio] = []
    for comparison in group.comparisons:
        ours = overhead[comparison.ours]
        for peer in comparison.peers:
            value = overhead[peer] / ours if ours > 0 else None
            ratios[peer] = f"{report.ratio(value)} vs {comparison.ours.split()[-1]}"
            found.append((f"{group.title}: {peer} / {comparison.ours}", value, comparison.target))
    rows = [[group.bare.name, f"{bare:.2f}", report.MISSING, report.MISSING]]
    for contender in group.limited:
        name = contender.name
        rows.append(
            [name, f"{best[name]:.2f}", f"{overhead[name]:+.2f}", ratios.get(name, report.MISSING)]
        )
    headers = ["application", "µs/request", "overhead µs", "peer overhead / ratekeeper's"]
    return report.table(headers, rows), found


def versions() -> str:
    return ", ".join(f"{name} {version(name)}" for name in PEER_PACKAGES)


def run(out: Output, sizes: WebSizes) -> None:
    """The web benchmarks: one table per group, then the ratios against the target."""
    out.emit("", "## Web integrations: overhead per request", "")
    out.emit(
        f"- Peers: {versions()}",
        "",
        f"In-process requests (no sockets), {sizes.requests:,} per measurement, best of "
        f"{sizes.repeats}, the applications of a group taking turns. Every limiter holds one "
        f'limit of "{LIMIT}" (fixed window, in memory) keyed by the client address, so every '
        "request is admitted; *overhead* is its time per request less the bare application's "
        f"in the same run. Each limiter was first checked to refuse the third request under "
        f'"{TINY}".',
    )
    summary: list[Ratio] = []
    with asyncio.Runner() as runner:
        for make in GROUPS:
            group = make()
            out.progress(f"{group.title}: checking that every limiter limits")
            headers = check_limits(group, runner)
            best = measure(group, sizes, runner, out)
            lines, ratios = table(group, best)
            out.emit("", f"### {group.title}", "", *lines, "")
            for contender in _all(group):
                sent = ", ".join(headers.get(contender.name, [])) or "none"
                extra = "" if contender is group.bare else f" Rate-limit headers sent: {sent}."
                out.emit(f"- {contender.name}: {contender.note}.{extra}")
            summary += ratios
    out.emit("", f"### Ratios: peer overhead / ratekeeper overhead (target ≥ {TARGET:g}x)", "")
    rows = []
    for label, value, target in summary:
        mark = "" if value is None or target is None else (" ✓" if value >= target else " ✗")
        rows.append(
            [label, report.ratio(value) + mark, f"{target:g}x" if target else "report only"]
        )
    out.emit(*report.table(["comparison", "ratio", "target"], rows))
