"""Sending the combination matrix's requests through each surface, and reading the service's
figures afterwards.

- The service: a real ``ratekeeper serve`` (``tests.service.served.Served``) per case, over
  HTTP (``POST /v1/check``), gRPC (``ShouldRateLimit``) or nginx (``tests.gateways``'s
  ``NginxServer``, one per module, running ``deploy/nginx/ratekeeper.conf`` with the
  service's port taken from a request header, so that one nginx serves every case). With 2
  workers each request comes on a new connection (a gRPC channel of its own), so that both
  workers decide.
- The library: ``ratekeeper.web``'s WSGI middleware over an ``Engine`` (rules, overrides,
  shadow mode, debt) or, for limits charged by outcome, a ``Limiter``; with 2 workers, two
  spawned processes over one store, taking the requests in turn.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
from werkzeug.test import Client

from ratekeeper import Engine, Limit, Limiter, open_store
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.core.store_keys import descriptor_key
from ratekeeper.service.http.nginx import call_of
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.web import RateLimit, keys
from ratekeeper.web.wsgi import RateLimitMiddleware
from tests.gateways import NGINX_CONF, Response, http_request, nginx_config, render
from tests.service.combinations import Case
from tests.service.combined_traffic import ADDRESS, DAY, DOMAIN, USER, VIP, Request
from tests.service.served import Served
from tests.service.workers import decisions_by_worker

TOKEN = "combinations-admin-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
#: The service's HTTP port, as nginx reads it from each request (one nginx, many services).
PORT_HEADER = "X-Ratekeeper-Port"


@dataclass
class Seen:
    """One answer as its client saw it: ``status`` (gRPC: 200 for OK, 429 for OVER_LIMIT),
    ``headers`` (lower-case names), and, where the surface shows them, each counted
    descriptor's ``(limit, remaining, ok)`` in the request's order."""

    status: int
    headers: dict[str, str]
    statuses: list[tuple[int, int, bool]] | None = None


def entries_of(key: str) -> tuple[tuple[str, str], ...]:
    """The descriptor of a model key: ``user:alice`` is ``(("user", "alice"),)``."""
    name, _, value = key.partition(":")
    return ((name, value),)


# -- the service -----------------------------------------------------------------------------


def seed_overrides(case: Case, directory: Path) -> str:
    """The configuration store's URL for a service in ``directory`` (relative to it) or for
    the library (absolute), holding ``user:vip``'s override when the case has overrides."""
    url = f"sqlite:///{directory / 'config.db'}"
    if case.overrides:
        config = open_config_store(url)
        sync = "leased" if case.leased else "exact"
        override = Override(VIP.amount, VIP.period, VIP.algorithm, sync=sync)
        config.set("user:vip", override, domain=DOMAIN)
        config.close()
    return url


def serve(case: Case, directory: Path, store: str) -> Served:
    flags = ["--workers", str(case.workers), "--store", store, "--rules", "rules.yaml"]
    flags += ["--config", "sqlite:///config.db", "--admin-token", TOKEN]
    for feature, flag in (("dashboard", "--dashboard"), ("debt", "--debt")):
        if getattr(case, feature):
            flags.append(flag)
    if case.shadow:
        flags.append("--shadow-mode")
    return Served(directory, *flags)


def nginx_site(upstream_port: int) -> str:
    """``deploy/nginx/ratekeeper.conf`` in front of the application on ``upstream_port``,
    asking the service whose HTTP port the request names in ``X-Ratekeeper-Port``."""
    text = nginx_config(upstream_port=upstream_port, ratekeeper_port=1)
    assert "proxy_pass http://ratekeeper/v1/nginx;" in NGINX_CONF.read_text()
    header = PORT_HEADER.lower().replace("-", "_")
    return render(
        text,
        {
            "proxy_pass http://ratekeeper/v1/nginx;": (
                f"proxy_pass http://127.0.0.1:$http_{header}/v1/nginx;"
            )
        },
    )


def _json(call_headers: dict[str, str]) -> dict[str, Any]:
    call = call_of({**call_headers, "X-RateLimit-Domain": DOMAIN})
    return {
        "domain": call.domain,
        "descriptors": [
            {"entries": [{"key": k, "value": v} for k, v in d.entries]} for d in call.descriptors
        ],
    }


class Pinned:
    """Keep-alive connections to the service, one accepted by each of its worker processes
    ``pids`` (whose decision counts are in ``directory``), used in turn: two workers then
    share the requests whatever the kernel's choice of acceptor. Which worker took a
    connection is found by a probe, a ``/v1/check`` of a domain no rule names (counted by the
    metrics under ``unknown``; ``probes`` counts them; a peek is no decision, and is not)."""

    def __init__(self, port: int, directory: Path, pids: list[int]) -> None:
        self.port, self.directory, self.pids = port, directory, pids
        self.probes = 0
        found: dict[int, http.client.HTTPConnection] = {}
        for _ in range(50):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            pid = self._probe(connection)
            if pid in found:
                connection.close()
                continue
            found[pid] = connection
            if len(found) == len(pids):
                break
        else:
            raise AssertionError(f"no connection reached every worker: {sorted(found)}")
        self.connections = [found[pid] for pid in sorted(found)]

    def _counts(self) -> dict[int, float]:
        counting = [p for p in self.pids if (self.directory / f"counter_{p}.db").exists()]
        return {**dict.fromkeys(self.pids, 0.0), **decisions_by_worker(self.directory, counting)}

    def _probe(self, connection: http.client.HTTPConnection) -> int:
        before = self._counts()
        probe = {"domain": "probe", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}
        answer = self.post(connection, "/v1/check", probe)
        assert answer.status == 200
        self.probes += 1
        after = self._counts()
        (pid,) = [p for p in self.pids if after[p] > before[p]]
        return pid

    @staticmethod
    def post(connection: http.client.HTTPConnection, path: str, body: Any) -> Response:
        data = json.dumps(body).encode()
        connection.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        headers = {name.lower(): value for name, value in answer.getheaders()}
        return Response(answer.status, headers, answer.read())

    def close(self) -> None:
        for connection in self.connections:
            connection.close()


def through_http(served: Served, request: Request, pinned: Pinned | None, n: int) -> Seen:
    body = _json(request.headers)
    if pinned is None:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        answer = http_request(served.http, "/v1/check", method="POST", body=data, headers=headers)
    else:
        connection = pinned.connections[n % len(pinned.connections)]
        answer = pinned.post(connection, "/v1/check", body)
    statuses = [
        (s["current_limit"]["requests_per_unit"], s["remaining"], s["code"] == "OK")
        for s in answer.json()["statuses"]
        if s["current_limit"] is not None
    ]
    return Seen(answer.status, answer.headers, statuses)


def through_nginx(port: int, served: Served, request: Request) -> Seen:
    headers = {PORT_HEADER: str(served.http)}
    if request.user is not None:
        headers["X-User"] = request.user
    answer = http_request(port, request.path, headers=headers, source=request.address)
    return Seen(answer.status, answer.headers)


class GrpcClient:
    """``ShouldRateLimit`` calls: on one channel, or on a channel of their own each (``fresh``:
    each a new connection, which any worker may accept)."""

    def __init__(self, port: int, fresh: bool) -> None:
        self.target = f"127.0.0.1:{port}"
        self.fresh = fresh
        self.channel: grpc.Channel | None = None

    def call(self, request: Request) -> Seen:
        call = call_of({**request.headers, "X-RateLimit-Domain": DOMAIN})
        entry = ratelimit_pb2.RateLimitDescriptor.Entry
        message = rls_pb2.RateLimitRequest(
            domain=call.domain,
            descriptors=[
                ratelimit_pb2.RateLimitDescriptor(entries=[entry(key=k, value=v) for k, v in d])
                for d in (one.entries for one in call.descriptors)
            ],
        )
        if self.channel is None or self.fresh:
            self.close()  # a channel of its own subchannels: a connection of its own
            options = [("grpc.use_local_subchannel_pool", 1)]
            self.channel = grpc.insecure_channel(self.target, options=options)
        stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)
        answer = stub.ShouldRateLimit(message, timeout=10)
        statuses = [
            (s.current_limit.requests_per_unit, s.limit_remaining, s.code == answer.OK)
            for s in answer.statuses
            if s.HasField("current_limit")
        ]
        return Seen(200 if answer.overall_code == answer.OK else 429, {}, statuses)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def fresh(url: str) -> httpx.Client:
    """A client opening a connection of its own for each request: any worker may answer."""
    return httpx.Client(base_url=url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0))


def peek(http: httpx.Client, key: str) -> int:
    """What ``/v1/peek`` says is left of ``key``."""
    entries = [{"key": k, "value": v} for k, v in entries_of(key)]
    answer = http.post("/v1/peek", json={"domain": DOMAIN, "descriptors": [{"entries": entries}]})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["statuses"][0]["remaining"])


# -- the library -----------------------------------------------------------------------------


def login(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """The application: a login that fails (401) when asked to."""
    fails = "fail=1" in environ.get("QUERY_STRING", "")
    start_response("401 Unauthorized" if fails else "200 OK", [("Content-Type", "text/plain")])
    return [b""]


def library_limits(case: Case) -> tuple[Limit, Limit]:
    """The address and user limits of a case charged by outcome, as the rules give them; with
    debt the user limit is exact, as the engine's ``with_debt`` makes a leased one."""
    sync = "leased" if case.leased and not case.debt else "exact"
    user = Limit(USER.amount, DAY, USER.algorithm, sync=sync, debt=case.debt)
    address = Limit(ADDRESS.amount, ADDRESS.period, ADDRESS.algorithm, debt=case.debt)
    return address, user


def library(case: Case, store: str, config: str, rules: str) -> tuple[Any, Engine | Limiter]:
    """The application behind the middleware of ``case``, and what decides for it."""
    if case.outcome:
        limiter = Limiter(open_store(store))
        address, user = library_limits(case)
        prefix = 24 if case.blocks else 32
        limits = [
            RateLimit(
                address, key=keys.client_ip(ipv4_prefix=prefix), scope=DOMAIN,
                charge_statuses={401},
            ),
            RateLimit(
                user, key=keys.header("X-User", "user"), scope=DOMAIN, charge_statuses={401}
            ),
        ]  # fmt: skip
        return RateLimitMiddleware(login, limiter, limits, all_or_nothing=False), limiter
    engine = Engine(store, rules=rules, config=config, shadow=case.shadow, debt=case.debt)
    descriptors = [keys.client_ip(), keys.header("X-User", "user")]
    return RateLimitMiddleware(login, engine, domain=DOMAIN, descriptors=descriptors), engine


def through_library(client: Client, request: Request) -> Seen:
    headers = {} if request.user is None else {"X-User": request.user}
    answer = client.get(request.path, headers=headers, environ_overrides={
        "REMOTE_ADDR": request.address
    })  # fmt: skip
    return Seen(answer.status_code, {k.lower(): v for k, v in answer.headers.items()})


def library_peek(case: Case, decider: Engine | Limiter, key: str) -> int:
    """What is left of ``key``, as the library counts it."""
    if isinstance(decider, Engine):
        return decider.check(DOMAIN, [entries_of(key)], 0).statuses[0].remaining
    address, user = library_limits(case)
    limit = user if key.startswith("user:") else address
    counter = f"{descriptor_key((('scope', DOMAIN),))}|{descriptor_key(entries_of(key))}"
    return decider.peek(counter, limit).remaining


def _worker(case: dict[str, Any], store: str, config: str, rules: str, pipe: Any) -> None:
    """One library process: decides the requests it is sent until it is sent None."""
    app, decider = library(Case(**case), store, config, rules)
    client = Client(app)
    pipe.send("ready")
    while (request := pipe.recv()) is not None:
        pipe.send(asdict(through_library(client, Request(**request))))
    decider.close()  # gives back what its slices hold
    pipe.send("closed")


@contextmanager
def library_processes(
    case: Case, store: str, config: str, rules: str
) -> Iterator[Callable[[int, Request], Seen]]:
    """``case.workers`` library processes; yields ``send(n, request)``, which has process
    ``n % workers`` decide ``request``. They have closed their deciders when it ends."""
    context = multiprocessing.get_context("spawn")
    pipes, processes = [], []
    for _ in range(case.workers):
        mine, theirs = context.Pipe()
        process = context.Process(target=_worker, args=(asdict(case), store, config, rules, theirs))
        process.start()
        pipes.append(mine)
        processes.append(process)
    try:
        for pipe in pipes:
            assert pipe.poll(60), "a library process did not start"
            assert pipe.recv() == "ready"

        def send(n: int, request: Request) -> Seen:
            pipe = pipes[n % len(pipes)]
            pipe.send(asdict(request))
            return Seen(**pipe.recv())

        yield send
        for pipe in pipes:
            pipe.send(None)
            assert pipe.poll(30) and pipe.recv() == "closed"
    finally:
        for process in processes:
            process.join(30)
            if process.exitcode is None:
                process.kill()
                process.join(10)
        for pipe in pipes:
            pipe.close()
    assert [process.exitcode for process in processes] == [0] * len(processes)
