"""The shipped gateway files (``deploy/``) in front of many ``ratekeeper serve`` instances,
failing closed, with their timeouts for ratekeeper's answer raised for thousands of decisions
at once on a shared test machine."""

from __future__ import annotations

from tests.gateways import UpstreamServer, envoy_config, nginx_config, render
from tests.service.served import Served

#: Seconds a gateway waits for ratekeeper's decision under this load.
DECISION_TIMEOUT = 30


def nginx_over(instances: list[Served], upstream: UpstreamServer, domain: str) -> str:
    """The shipped nginx file, failing closed, with one ``server`` line per instance."""
    text = nginx_config(
        upstream_port=upstream.port, ratekeeper_port=instances[0].http, fail_open=False
    )
    servers = "\n    ".join(f"server 127.0.0.1:{one.http};" for one in instances)
    return render(
        text,
        {
            f"server 127.0.0.1:{instances[0].http};": servers,
            "listen 127.0.0.1:{{port}};": "listen 127.0.0.1:{{port}} backlog=4096;",
            "X-RateLimit-Domain edge;": f"X-RateLimit-Domain {domain};",
            "proxy_connect_timeout 250ms;": f"proxy_connect_timeout {DECISION_TIMEOUT}s;",
            "proxy_send_timeout 1s;": f"proxy_send_timeout {DECISION_TIMEOUT}s;",
            "proxy_read_timeout 1s;": f"proxy_read_timeout {DECISION_TIMEOUT}s;",
        },
    )


def envoy_over(instances: list[Served], upstream: UpstreamServer, domain: str) -> str:
    """The shipped Envoy file, failing closed, its ``ratekeeper`` cluster round robin over the
    instances' gRPC ports."""
    text = envoy_config(
        upstream_port=upstream.port, ratekeeper_port=instances[0].grpc, failure_mode_deny=True
    )
    endpoint = (
        "        - endpoint:\n"
        "            address:\n"
        "              socket_address: {{address: 127.0.0.1, port_value: {port}}}\n"
    )
    first = endpoint.format(port=instances[0].grpc)
    limits = ("max_connections", "max_pending_requests", "max_requests")
    thresholds = ", ".join(f"{name}: 100000" for name in limits)
    breakers = f"    circuit_breakers: {{thresholds: [{{{thresholds}}}]}}"
    round_robin = "    lb_policy: ROUND_ROBIN\n"
    return render(
        text,
        {
            first.rstrip("\n") + "  # <- SET ratekeeper\n": "".join(
                endpoint.format(port=one.grpc) for one in instances
            ),
            "  - name: ratekeeper\n": f"  - name: ratekeeper\n{round_robin}{breakers}\n",
            "\n  - name: application\n": f"\n  - name: application\n{breakers}\n",
            "  - name: ingress\n": "  - name: ingress\n    tcp_backlog_size: 4096\n",
            "domain: edge  # <- SET": f"domain: {domain}  # <- SET",
            "              timeout: 0.25s": f"              timeout: {DECISION_TIMEOUT}s",
            "max_interval: 0.25s}": f"max_interval: {DECISION_TIMEOUT}s}}",  # each try's timeout
        },
    )
