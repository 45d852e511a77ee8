"""The rows of the service benchmark, and one row's measurement on a fresh key.

A ``Measurement`` checks its row's answer through a real client, warms up, runs the load
generator and checks the key's count afterwards (see ``benchmarks.service.suite``). A row may
run on a server started with one of ``ratekeeper serve``'s production options (``OPTIONS``);
its answer, the server's log or its dashboard then shows the option at work, and the row is
compared with the same row without it. A ``--dashboard`` row may also run with the dashboard's
page open (``benchmarks.service.page``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

from benchmarks.service import load
from benchmarks.service.load import Load
from benchmarks.service.page import Page
from benchmarks.service.servers import GRPC_METHOD, Server, tree_cpu_seconds
from benchmarks.trials import BenchmarkError
from ratekeeper.service.proto import rls_pb2

#: The allow path's limit (a day, fixed window): no run can exhaust it.
AMOUNT = 1_000_000_000
RULES = f"""
domain: bench
descriptors:
  - key: client
    rate_limit: {{unit: day, requests_per_unit: {AMOUNT}}}
  - key: blocked
    rate_limit: {{unit: day, requests_per_unit: 1}}
"""
BASELINE, MEMORY, REDIS = "hello world", "memory", "redis"
STARLETTE, STARLETTE_PATH = "hello (Starlette)", "/starlette"

#: The production options some rows' servers run with, and what each makes the server do.
ENVOY_HEADERS, ACCESS_LOG, DASHBOARD = "--envoy-headers", "--access-log", "--dashboard"
#: The service (and a hello world) on pyvoy, HTTP and gRPC on one address: only when pyvoy is
#: installed (the ``pyvoy`` extra).
PYVOY = "--server pyvoy"
#: The admin token of the servers run with ``--dashboard``, which needs one.
TOKEN = "ratekeeper-bench-admin-token"
#: What an option adds to ``ratekeeper serve``'s command, where it is more than its flag.
ARGUMENTS = {DASHBOARD: (DASHBOARD, "--admin-token", TOKEN), PYVOY: ("--server", "pyvoy")}
#: How a row with the dashboard's page open is named.
PAGE_OPEN = "page open"
OPTIONS = {
    ENVOY_HEADERS: "the gRPC answer carries `response_headers_to_add`: `X-RateLimit-Limit`, "
    "`-Remaining`, `-Reset`, and `Retry-After` when refused (checked on the row's first answer; "
    "every other gRPC row is checked to carry none)",
    ACCESS_LOG: "one INFO line a request from the `ratekeeper.access` logger, in the text "
    "format, on stderr, which the benchmark writes to the server's log file as it does every "
    "server's output; after each run the file must hold a line for every answer",
    DASHBOARD: "with `--admin-token`: the dashboard's recorder is the engine's observer in front "
    "of the metrics (a lock and a dict update a descriptor, a tick once a second); after each "
    "run `GET /v1/top` (with the token) must count every answer on the row's key. With the "
    f"*{PAGE_OPEN}*, a thread on the load generator's CPU asks `GET /v1/stats` once a second "
    "with `Authorization: Bearer <token>` from before the warm-up to the end of the timed run, "
    "as the dashboard's page does; every poll must be answered 200, and at least one a second",
    PYVOY: "HTTP and gRPC on one address in Envoy's HTTP/2, through pyvoy (gRPC as a raw ASGI "
    "app, `ratekeeper.service.grpc.asgi`); its hello world is the gRPC hello world as the same "
    "raw ASGI app (`benchmarks.service.grpc_hellos.grpc_asgi`) on pyvoy. The CPU time is "
    "Envoy's (pyvoy runs Python in it) and its parent's.",
}
#: The headers ``--envoy-headers`` adds to an answer, and to a refusal.
ENVOY_NAMES = frozenset({"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"})
ENVOY_REFUSED = ENVOY_NAMES | {"Retry-After"}
#: What starts the access log's line of a ``POST /v1/check``.
ACCESS_LINE = b" ratekeeper.access: POST /v1/check "
#: How long the access log may lag behind the last answer the load generator read.
LOG_LAG = 5.0


@dataclass(frozen=True)
class ServiceSizes:
    """How long a service run takes: ``--quick`` shrinks it."""

    seconds: float = 5.0  # one timed measurement
    warmup: float = 2.0  # before each measurement, on the same key (0: none)
    rounds: int = 3
    connections: int = 64


SERVICE_QUICK = ServiceSizes(seconds=2.0, warmup=1.0, rounds=1)


@dataclass(frozen=True)
class Row:
    """One line of the table: a request shape on one surface and one server."""

    surface: str  # "HTTP" or "gRPC"
    shape: str  # "hello", "hello (Starlette)", "key", "descriptor", "refused key", ...
    server: str  # BASELINE, MEMORY or REDIS
    option: str = ""  # one of OPTIONS that its server runs with, or none
    watched: bool = False  # the dashboard's page open while it runs (DASHBOARD only)

    def __post_init__(self) -> None:
        if self.watched and self.option != DASHBOARD:
            raise ValueError(f"only a {DASHBOARD} row has a page open, not {self}")

    @property
    def instance(self) -> str:
        """The server process it runs on: its store, and its option if it has one."""
        return f"{self.server} {self.option}" if self.option else self.server

    @property
    def setting(self) -> str:
        """Its option as the tables show it: with the page open, if it is."""
        return f"{self.option}, {PAGE_OPEN}" if self.watched else self.option

    @property
    def arguments(self) -> tuple[str, ...]:
        """What its option adds to ``ratekeeper serve``'s command."""
        return ARGUMENTS.get(self.option, (self.option,)) if self.option else ()

    @property
    def without(self) -> Row:
        """The same row on the server without the option."""
        return replace(self, option="", watched=False)

    @property
    def refused(self) -> bool:
        return self.shape.startswith("refused")

    @property
    def path(self) -> str:
        """The HTTP path it posts to."""
        return STARLETTE_PATH if self.shape == STARLETTE else "/v1/check"

    @property
    def label(self) -> str:
        page = f", {PAGE_OPEN}" if self.watched else ""
        return f"{self.surface} {self.shape} ({self.instance}{page})"


ROWS = (
    Row("HTTP", "hello", BASELINE),
    Row("HTTP", STARLETTE, BASELINE),
    Row("HTTP", "key", MEMORY),
    Row("HTTP", "key", MEMORY, ACCESS_LOG),
    Row("HTTP", "key", MEMORY, DASHBOARD),
    Row("HTTP", "key", MEMORY, DASHBOARD, watched=True),
    Row("HTTP", "descriptor", MEMORY),
    Row("HTTP", "descriptor", MEMORY, DASHBOARD),
    Row("HTTP", "descriptor", MEMORY, DASHBOARD, watched=True),
    Row("HTTP", "key", REDIS),
    Row("HTTP", "descriptor", REDIS),
    Row("HTTP", "refused key", MEMORY),
    Row("gRPC", "hello", BASELINE),
    Row("gRPC", "descriptor", MEMORY),
    Row("gRPC", "descriptor", MEMORY, ENVOY_HEADERS),
    Row("gRPC", "descriptor", MEMORY, DASHBOARD),
    Row("gRPC", "descriptor", MEMORY, DASHBOARD, watched=True),
    Row("gRPC", "descriptor", REDIS),
    Row("gRPC", "refused descriptor", MEMORY),
    Row("gRPC", "refused descriptor", MEMORY, ENVOY_HEADERS),
    Row("HTTP", "key", MEMORY, PYVOY),
    Row("gRPC", "hello", BASELINE, PYVOY),
    Row("gRPC", "descriptor", MEMORY, PYVOY),
    Row("gRPC", "descriptor", REDIS, PYVOY),
)

#: What each request shape sends, as the table says it.
SHAPES = {
    ("HTTP", "hello"): 'any body; the answer `{"message":"hello"}`',
    ("HTTP", STARLETTE): "the same, through a Starlette app of one route (`Request.body()`, "
    "`Response`), for reference: the share of the framework alone",
    ("HTTP", "key"): f'`{{"key": K, "limit": "{AMOUNT}/day"}}`',
    ("HTTP", "descriptor"): '`{"domain": "bench", "descriptors": [{"entries": [{"key": '
    '"client", "value": V}]}]}`, matched by a rule of 1,000,000,000 a day',
    ("HTTP", "refused key"): '`{"key": K, "limit": "1/day"}`, K already counted once',
    ("gRPC", "hello"): "the same `RateLimitRequest`; the answer a new `RateLimitResponse(OK)`",
    ("gRPC", "descriptor"): "`RateLimitRequest(domain='bench', descriptors=[[('client', V)]])`",
    ("gRPC", "refused descriptor"): "`[('blocked', V)]`, a rule of 1 a day, V counted once",
}


@dataclass(frozen=True)
class Result:
    """One measurement: the load generator's view, and the server's CPU seconds a request."""

    load: Load
    cpu: float


class Timed(Protocol):
    """A timed run: what the load generator saw, and the server's CPU seconds a request."""

    @property
    def load(self) -> Load: ...

    @property
    def cpu(self) -> float: ...


TimedT = TypeVar("TimedT", bound=Timed)


@dataclass
class Rounds(Generic[TimedT]):
    """A row's measurements, one a round."""

    results: list[TimedT] = field(default_factory=list)

    @property
    def best(self) -> TimedT:
        """The round of the highest rate."""
        return max(self.results, key=lambda one: one.load.rate)

    @property
    def cpu(self) -> float:
        """The least CPU time a request took, over the rounds."""
        return min(one.cpu for one in self.results)


#: The suite's rows' measurements.
Measured = Rounds[Result]


class Measurement:
    """One row's run on a fresh key: checked before, loaded, checked after (see the module)."""

    def __init__(self, row: Row, server: Server, sizes: ServiceSizes, tag: str) -> None:
        self.row, self.server, self.sizes = row, server, sizes
        self.value = f"{tag}-{time.time_ns()}"
        self.key = f"bench:{self.value}"

    # What is sent.

    def http_body(self) -> dict[str, Any]:
        shape = self.row.shape
        if shape in ("key", "hello", STARLETTE):
            return {"key": self.key, "limit": f"{AMOUNT}/day"}
        if shape == "refused key":
            return {"key": self.key, "limit": "1/day"}
        return {"domain": "bench", "descriptors": [{"entries": self._entries()}]}

    def _entries(self) -> list[dict[str, str]]:
        name = "blocked" if self.row.refused else "client"
        return [{"key": name, "value": self.value}]

    def grpc_request(self) -> rls_pb2.RateLimitRequest:
        request = rls_pb2.RateLimitRequest(domain="bench")
        descriptor = request.descriptors.add()
        for entry in self._entries():
            descriptor.entries.add(key=entry["key"], value=entry["value"])
        return request

    # The checks.

    def check_http(self) -> None:
        server, body = self.server, self.http_body()
        if self.row.server == BASELINE:
            status, answer = server.post(self.row.path, body)
            if status != 200 or answer != {"message": "hello"}:
                raise BenchmarkError(f"{self.row.label}: the hello world answered {answer}")
            return
        if self.row.refused:
            server.post("/v1/check", body)  # the one hit the limit allows
        status, answer = server.post("/v1/check", body)
        meant = (429, False) if self.row.refused else (200, True)
        if (status, answer.get("allowed")) != meant or answer.get("degraded"):
            raise BenchmarkError(f"{self.row.label}: a check answered {status} {answer}")

    def check_grpc(self) -> bytes:
        server, request = self.server, self.grpc_request()
        if self.row.refused:
            server.should_rate_limit(request)  # the one hit the limit allows
        response = server.should_rate_limit(request)
        Code = rls_pb2.RateLimitResponse
        meant = Code.OVER_LIMIT if self.row.refused else Code.OK
        if response.overall_code != meant:
            raise BenchmarkError(f"{self.row.label}: ShouldRateLimit answered {response}")
        headers = {header.key for header in response.response_headers_to_add}
        added: frozenset[str] = frozenset()
        if self.row.option == ENVOY_HEADERS:
            added = ENVOY_REFUSED if self.row.refused else ENVOY_NAMES
        if headers != added:
            raise BenchmarkError(
                f"{self.row.label}: the answer's response_headers_to_add are "
                f"{sorted(headers)}, not {sorted(added)}"
            )
        data = load.grpc_frame(request.SerializeToString())
        status = load.grpc_status(server.grpc_url + GRPC_METHOD, data)
        if status != "0":
            raise BenchmarkError(
                f"{self.row.label}: h2load's request is answered grpc-status {status}, not 0"
            )
        return data

    def counted(self) -> int:
        """How many hits the key's limit has counted, read with a peek."""
        body = self.http_body()
        status, answer = self.server.post("/v1/peek", body)
        if status != 200:
            raise BenchmarkError(f"{self.row.label}: a peek answered {status} {answer}")
        return AMOUNT - int(answer["statuses"][0]["remaining"])

    def _log_size(self) -> int:
        return self.server.log.stat().st_size

    def _check_logged(self, offset: int, answers: int) -> None:
        """The access log's lines past ``offset`` in the server's log file must number at least
        ``answers``: the last ones are given ``LOG_LAG`` seconds to be written."""
        deadline = time.monotonic() + LOG_LAG
        while True:
            with self.server.log.open("rb") as file:
                file.seek(offset)
                logged = file.read().count(ACCESS_LINE)
            if logged >= answers:
                return
            if time.monotonic() > deadline:
                raise BenchmarkError(
                    f"{self.row.label}: the access log holds {logged:,} lines for "
                    f"{answers:,} answers"
                )
            time.sleep(0.05)

    def _check_recorded(self, answers: int) -> None:
        """The dashboard's top keys of the last minute must count at least ``answers``
        decisions on the row's key."""
        name = self.key if self.row.shape == "key" else f"client:{self.value}"
        top = self.server.client.get(
            "/v1/top", params={"window": 60, "n": 100}, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        if top.status_code != 200:
            raise BenchmarkError(f"{self.row.label}: GET /v1/top answered {top.status_code}")
        counts = {one["key"]: one["count"] for one in top.json()["requests"]["keys"]}
        if counts.get(name, 0) < answers:
            raise BenchmarkError(
                f"{self.row.label}: the dashboard counted {counts.get(name, 0):,} decisions on "
                f"{name} for {answers:,} answers"
            )

    def _check_page(self, page: Page) -> None:
        """Every poll of the page answered 200, and at least one a second."""
        if page.failures or page.polls < max(1, int(page.seconds / page.interval)):
            raise BenchmarkError(
                f"{self.row.label}: the dashboard's page asked /v1/stats {page.polls} times in "
                f"{page.seconds:.1f} s, answered {dict(sorted(page.answers.items()))}"
            )

    # The run.

    def run(self, load_cpu: str | None) -> Result:
        """Check, warm up, time, check again: the timed run's load and the server's CPU time
        per request during it."""
        sizes, row = self.sizes, self.row
        started = datetime.now(UTC).date()
        generate: Callable[[float], Load]
        if row.surface == "HTTP":
            self.check_http()
            url, raw = self.server.url + row.path, json.dumps(self.http_body()).encode()
            expect_ok = not row.refused

            def generate(seconds: float) -> Load:
                return load.wrk(
                    url, raw, connections=sizes.connections, seconds=seconds, cpus=load_cpu,
                    expect_ok=expect_ok,
                )  # fmt: skip
        else:
            url, data = self.server.grpc_url + GRPC_METHOD, self.check_grpc()

            def generate(seconds: float) -> Load:
                return load.h2load(
                    url, data, connections=sizes.connections, seconds=seconds, cpus=load_cpu
                )

        offset = self._log_size()
        page: AbstractContextManager[Page | None] = nullcontext()
        if row.watched:
            page = Page(self.server.url, TOKEN, load_cpu)
        with page as open_page:
            runs = [generate(sizes.warmup)] if sizes.warmup > 0 else []
            before = tree_cpu_seconds(self.server.process.pid)
            timed = generate(sizes.seconds)
            cpu = tree_cpu_seconds(self.server.process.pid) - before
        runs.append(timed)
        for one in runs:
            if one.failures:
                raise BenchmarkError(
                    f"{row.label}: {one.failures} of {one.requests} answers were not "
                    f"{'refusals' if row.refused else 'successes'} {one.detail}".rstrip()
                )
        answers = sum(one.requests for one in runs)
        if row.option == ACCESS_LOG:
            self._check_logged(offset, answers)
        if open_page is not None:
            self._check_page(open_page)
        if row.option == DASHBOARD:
            self._check_recorded(answers)
        if row.server != BASELINE and not row.refused:
            counted, meant = self.counted(), answers
            if counted < meant and datetime.now(UTC).date() == started:
                raise BenchmarkError(
                    f"{row.label}: the key counted {counted:,} hits for {meant:,} answers: "
                    "some answers were not decisions"
                )
        if timed.requests == 0:
            raise BenchmarkError(f"{row.label}: the timed run completed no request {timed.detail}")
        return Result(timed, cpu / timed.requests)
