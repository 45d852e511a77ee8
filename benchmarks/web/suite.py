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
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

from benchmarks import report
from benchmarks.report import Output
from benchmarks.web.asgi_apps import fastapi_group, starlette_group
from benchmarks.web.groups import HEADERS, LIMIT, TARGET, TINY, Contender, Group
from benchmarks.web.wsgi_apps import django_group, flask_group

#: The peers' packages, for the versions in the header.
PEER_PACKAGES = ("starlette", "fastapi", "slowapi", "flask", "flask-limiter", "django")
PEER_PACKAGES += ("django-ratelimit", "limits")

#: Every group, in the order of the tables.
GROUPS: tuple[Callable[[], Group], ...] = (
    starlette_group,
    fastapi_group,
    flask_group,
    django_group,
)


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
        if contender.reference:
            continue
        built = _build(group, contender, TINY, runner)
        statuses = [built.probe() for _ in range(3)]
        codes = [response.status for response in statuses]
        admitted = contender.admitted
        if codes != [admitted, admitted, contender.refused]:
            raise BenchmarkError(
                f"{contender.name} does not limit: {TINY} answered {codes}, "
                f"not [{admitted}, {admitted}, {contender.refused}]"
            )
        headers[contender.name] = sorted(
            name for name in statuses[0].headers if "ratelimit" in name
        )
        if contender.headers and not set(HEADERS) <= set(headers[contender.name]):
            raise BenchmarkError(
                f"{contender.name} sends {headers[contender.name]}, not all of {HEADERS}: "
                "it would do less work than the others"
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
                limiter = contender is not group.bare and not contender.reference
                extra = f" Rate-limit headers sent: {sent}." if limiter else ""
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
