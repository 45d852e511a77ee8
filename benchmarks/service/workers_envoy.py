"""The every-core benchmark's Envoy: a listener for each deployment of the service and pool.

Each listener's route runs Envoy's rate-limit filter (``failure_mode_deny: false``, domain
``bench``, the descriptor ``client=<x-client>`` or ``hot=<x-hot>`` from the route's
``rate_limits``) against the deployment's rate-limit cluster: the gRPC port of ``ratekeeper
serve --workers N`` (grpc.aio), or the HTTP port of each ``--server pyvoy`` instance, one
endpoint each, which Envoy takes in turn (round robin). Past the filter, Envoy answers 200
itself: the fault filter aborts every request with 200 (``local_reply``), a local reply, so the
router never forwards it. The route still names a cluster (``app_<id>``, the listener
``answer`` of the same Envoy), because the rate-limit filter asks only on a route to one, and
counts its answers under it. Routed to that listener instead, each request cost Envoy three
to four times the CPU (its own request again, upstream and down), and Envoy, on the load's
core, could not send the service enough calls to keep its core busy: a service that waits
between calls pays each wake-up on fewer of them, and its CPU a decision rose with it.
Envoy keeps one HTTP/2 connection to each endpoint (``ONE``), or,
with ``max_concurrent_streams`` on the cluster (``MANY``), opens another each time those
streams are all in use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.processes import free_ports

from benchmarks.service import envoy_front

#: Envoy's pools to the server: its default (one connection an endpoint), and
#: ``max_concurrent_streams`` (a connection per so many streams in use).
ONE, MANY = "one", "many"
STREAMS = 4
#: A deployment of the service: its stack and its worker processes (pyvoy: its instances).
Deployment = tuple[str, int]


def name(deployment: Deployment, pool: str) -> str:
    """The id of a deployment's listener and clusters in Envoy's config."""
    stack, workers = deployment
    return f"{stack.replace('.', '_')}_w{workers}_{pool}"


class Envoy(envoy_front.Envoy):
    """One Envoy (one worker thread) with a listener for each deployment and pool, for the
    length of a ``with`` block; ``endpoints`` are each deployment's gRPC ports. Stopped by its
    pid."""

    def __init__(self, endpoints: Mapping[Deployment, Sequence[int]], directory: Path) -> None:
        keys = [(deployment, pool) for deployment in endpoints for pool in (ONE, MANY)]
        admin, answer, *listening = free_ports(2 + len(keys))
        self.ports = dict(zip(keys, listening, strict=True))
        listeners = [listener("answer", answer, direct(), [])]
        clusters = []
        for (deployment, pool), port in self.ports.items():
            id_ = name(deployment, pool)
            streams = STREAMS if pool == MANY else None
            listeners.append(listener(id_, port, limited(id_), [rate_limit(id_), local_reply()]))
            clusters += [
                envoy_front.cluster(f"app_{id_}", answer, False),
                envoy_front.cluster(f"rls_{id_}", endpoints[deployment], True, streams),
            ]
        config = {
            "admin": {"address": envoy_front.socket_address(admin)},
            "static_resources": {"listeners": listeners, "clusters": clusters},
        }
        super().__init__(config, admin, directory)


def direct() -> dict[str, Any]:
    return {"direct_response": {"status": 200, "body": {"inline_string": "hello\n"}}}


def local_reply() -> dict[str, Any]:
    """The fault filter, answering 200 to every request that gets past the rate-limit filter."""
    abort = {"http_status": 200, "percentage": {"numerator": 100, "denominator": "HUNDRED"}}
    return {
        "name": "envoy.filters.http.fault",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault",
            "abort": abort,
        },
    }


def limited(id_: str) -> dict[str, Any]:
    """The route to the answering listener (which ``local_reply`` keeps it from reaching), with the
    descriptors of ``x-client`` and ``x-hot``."""
    actions = [
        {"actions": [{"request_headers": {"header_name": f"x-{key}", "descriptor_key": key}}]}
        for key in ("client", "hot")
    ]
    return {"route": {"cluster": f"app_{id_}", "rate_limits": actions}}


def rate_limit(id_: str) -> dict[str, Any]:
    """Envoy's rate-limit filter, asking the cluster ``rls_<id_>``."""
    return {
        "name": "envoy.filters.http.ratelimit",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
            "domain": "bench",
            "timeout": "2s",
            "failure_mode_deny": False,
            "rate_limit_service": {
                "transport_api_version": "V3",
                "grpc_service": {"envoy_grpc": {"cluster_name": f"rls_{id_}"}},
            },
        },
    }


def listener(
    id_: str, port: int, route: dict[str, Any], filters: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "name": id_,
        "address": envoy_front.socket_address(port),
        "filter_chains": [{"filters": [envoy_front.manager(id_, route, filters)]}],
    }
