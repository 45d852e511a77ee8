"""Envoy's post-paid pattern through a real Envoy: the reference's token-quota and quota
sequences, with ``ratekeeper serve --debt`` on memory and on Redis.

Envoy is configured as the reference's example proxy (envoyproxy/ratelimit,
``examples/envoy/proxy.yaml``) configures its ``/tokenquota`` and ``/quota`` routes: for
``/tokenquota`` a check of ``(service, service_2)`` with ``hits_addend: 0`` on the request
path, and a charge of ``hits_addend: 1`` on it when the response ends
(``apply_on_stream_done``); for ``/quota`` the descriptors ``(service, service_1)`` and
``(service, service_2)``, each counting 1. ratekeeper serves the reference's own rules
(``examples/ratelimit/config/example.yaml``: ``service_1`` 1 a minute and ``service_2`` 2 a
minute, both in ``quota_mode``). As the reference's ``integration-test/scripts/token-quota.sh``
and ``quota.sh`` expect: requests 1 to 3 to ``/tokenquota`` pass and the 4th is refused, and
the 3rd request to ``/quota`` is refused.

Each route has a listener of its own, and each listener its own ``ratekeeper serve`` (their
own state), so that both sequences run in one window of a minute: the test starts them only
when the current minute has at least 40 s left. Envoy sends a charge once it has answered
the client, so before the next request the test waits until ratekeeper has counted it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.gateways import PORT, EnvoyServer, UpstreamServer, http_request
from tests.servers import RedisServer, free_port, wait_until
from tests.service.served import Served

EXAMPLE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "rules" / "envoy" / "examples"
) / "example.yaml"

#: The least time left in the current minute for a sequence to start in it.
ROOM = 40.0

SERVICE_2 = {"entries": [{"key": "service", "value": "service_2"}]}


def _generic(value: str) -> str:
    return f"{{generic_key: {{descriptor_key: service, descriptor_value: {value}}}}}"


#: The routes' rate limits, as the reference's example proxy has them.
TOKEN_QUOTA = f"""
                    - actions: [{_generic("service_2")}]
                      hits_addend: {{number: 0}}
                    - actions: [{_generic("service_2")}]
                      hits_addend: {{number: 1}}
                      apply_on_stream_done: true"""
QUOTA = f"""
                    - actions: [{_generic("service_1")}]
                    - actions: [{_generic("service_2")}]"""

#: The types of Envoy's connection manager and of the rate-limit filter's route settings.
MANAGER = (
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
    ".HttpConnectionManager"
)
PER_ROUTE = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute"


def _listener(name: str, port: int | str, route: str, rate_limits: str) -> str:
    return f"""
  - name: {name}
    address:
      socket_address: {{address: 127.0.0.1, port_value: {port}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": {MANAGER}
          stat_prefix: {name}
          route_config:
            virtual_hosts:
            - name: backend
              domains: ["*"]
              routes:
              - match: {{prefix: {route}}}
                route: {{cluster: mock}}
                typed_per_filter_config:
                  envoy.filters.http.ratelimit:
                    "@type": {PER_ROUTE}
                    vh_rate_limits: INCLUDE
                    override_option: INCLUDE_POLICY
                    rate_limits:{rate_limits}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: rl
              request_type: external
              stage: 0
              timeout: 1s
              failure_mode_deny: true
              rate_limited_as_resource_exhausted: true
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{cluster_name: {name}}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"""


def _cluster(name: str, port: int, http2: bool) -> str:
    options = """
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}"""
    return f"""
  - name: {name}
    type: STATIC
    connect_timeout: 1s{options if http2 else ""}
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{address: 127.0.0.1, port_value: {port}}}"""


def envoy_config(*, upstream: int, token_grpc: int, quota_grpc: int, quota_port: int) -> str:
    """Envoy with a listener at ``{{port}}`` for ``/tokenquota`` asking the ratekeeper at
    ``token_grpc``, and one at ``quota_port`` for ``/quota`` asking the one at
    ``quota_grpc``; both proxy to the application at ``upstream``."""
    return "\n".join(
        [
            "admin:",
            "  address:",
            "    socket_address: {address: 127.0.0.1, port_value: {{admin_port}}}",
            "static_resources:",
            "  listeners:",
            _listener("tokenquota", PORT, "/tokenquota", TOKEN_QUOTA),
            _listener("quota", quota_port, "/quota", QUOTA),
            "  clusters:",
            _cluster("mock", upstream, http2=False),
            _cluster("tokenquota", token_grpc, http2=True),
            _cluster("quota", quota_grpc, http2=True),
            "",
        ]
    )


def wait_for_room_in_the_minute() -> float:
    """Wait (at most 60 - ``ROOM`` seconds) until the current minute has ``ROOM`` seconds
    left; return when that minute ends."""
    now = time.time()
    if 60 - now % 60 < ROOM:
        time.sleep(60 - now % 60 + 0.05)
        now = time.time()
    return now - now % 60 + 60


def service_2(served: Served) -> tuple[str, int]:
    """What ``served`` says of ``(service, service_2)`` now, counting nothing: its code and
    remaining hits."""
    body = {"domain": "rl", "descriptors": [{**SERVICE_2, "hitsAddend": 0}]}
    answer = httpx.post(f"{served.url}/json", json=body, timeout=5).json()
    status = answer["statuses"][0]
    return status["code"], int(status.get("limitRemaining", 0))


@pytest.fixture(params=["memory", "redis"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The request stores of the two ratekeepers: two memory stores, or two databases of a
    redis-server of the test's own."""
    if request.param == "memory":
        yield "memory://", "memory://"
        return
    server = RedisServer(tmp_path / "redis")
    try:
        with redis.Redis.from_url(server.url) as client:
            client.flushall()
        base = server.url.removesuffix("/0")
        yield f"{base}/1", f"{base}/2"
    finally:
        server.stop()


def test_the_limit_holds_from_the_first_window_on(tmp_path: Path, stores: tuple[str, str]) -> None:
    token_store, quota_store = stores
    upstream = UpstreamServer(tmp_path / "app")
    served = []
    envoy = None
    try:
        for name, store in (("token", token_store), ("quota", quota_store)):
            (tmp_path / name).mkdir()
            served.append(
                Served(tmp_path / name, "--rules", str(EXAMPLE), "--store", store, "--debt")
            )
        token, quota = served
        quota_port = free_port()
        config = envoy_config(
            upstream=upstream.port,
            token_grpc=token.grpc,
            quota_grpc=quota.grpc,
            quota_port=quota_port,
        )
        envoy = EnvoyServer(tmp_path / "envoy", config)
        ends = wait_for_room_in_the_minute()

        # token-quota.sh: a check of cost 0, and a charge of 1 once the response is done.
        answers = []
        for number in range(1, 5):
            headers = {"request-no": str(number)}
            answer = http_request(envoy.port, "/tokenquota", headers=headers)
            answers.append(answer.status)
            if answer.status == 200:  # its charge: 2 - number left, or a debt from the 3rd
                left = ("OK", 2 - number) if number < 3 else ("OVER_LIMIT", 0)
                wait_until(lambda left=left: service_2(token) == left, 5, f"charge {number}")
        assert answers == [200, 200, 200, 429]

        # quota.sh: both descriptors count 1 each; quota mode refuses once both are over.
        assert [http_request(quota_port, "/quota").status for _ in range(3)] == [200, 200, 429]
        assert time.time() < ends, "the sequences straddled a minute's edge"

        paths = [one["path"] for one in upstream.requests()]
        assert paths == ["/tokenquota"] * 3 + ["/quota"] * 2
    finally:
        if envoy is not None:
            envoy.stop()
        for one in served:
            one.stop()
        upstream.stop()
