"""The reference's example proxy and rules on the tests' addresses, shared by the tests that
put ratekeeper where envoyproxy/ratelimit runs: as a process and as an image."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.gateways import ADMIN_PORT, PORT, EnvoyServer, http_request

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLES = FIXTURES / "rules" / "envoy" / "examples"
PROXY = FIXTURES / "envoy_ratelimit" / "proxy.yaml"
#: Seconds a script needs left in the current minute.
ROOM = 12.0


def proxy_config(upstream: int, ratekeeper_grpc: int) -> str:
    """The reference's example proxy on the tests' addresses: its listener and admin on
    loopback at the ports Envoy chooses, its ``ratelimit`` cluster at ratekeeper's gRPC port,
    its mock upstreams at the tests' application; and the rate-limit filter's timeout 2 s."""
    text = PROXY.read_text()
    for old, new in [
        # Envoy's default, 20 ms, is short for a machine the tests share: an answer later than
        # that would be a request let through undecided (failure_mode_deny: false).
        ("domain: rl\n", "domain: rl\n                      timeout: 2s\n"),
        ("port_value: 8001", f"port_value: {ADMIN_PORT}"),
        ("port_value: 8888", f"port_value: {PORT}"),
        ("address: ratelimit\n", "address: 127.0.0.1\n"),
        ("port_value: 8081", f"port_value: {ratekeeper_grpc}"),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    for old, new in [
        ("address: 0.0.0.0", "address: 127.0.0.1"),
        ("address: envoy-mock", "address: 127.0.0.1"),
        ("port_value: 9999", f"port_value: {upstream}"),
        ("port_value: 10001", f"port_value: {upstream}"),
    ]:
        assert old in text, old
        text = text.replace(old, new)
    return text


def with_room() -> None:
    """Wait for the next minute unless ``ROOM`` seconds are left in this one."""
    left = 60.0 - time.time() % 60.0
    if left < ROOM:
        time.sleep(left + 0.2)


def ratelimit_stats(envoy: EnvoyServer) -> dict[str, int]:
    """Envoy's counters of its rate-limit calls (``ok``, ``over_limit``, ``error``,
    ``failure_mode_allowed``: each made when first counted), summed over the routes' clusters."""
    text = http_request(envoy.admin_port, "/stats?filter=ratelimit").body.decode()
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        counter = re.fullmatch(r"cluster\.[^.]+\.ratelimit\.(\w+)", name)
        if counter is not None:
            found[counter[1]] = found.get(counter[1], 0) + int(value)
    return found
