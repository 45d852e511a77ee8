"""The client's address counts by its block: an IPv6 client by its /64 unless told otherwise,
an IPv4 client by its address unless ``ipv4_prefix`` groups it; through ASGI and WSGI."""

from __future__ import annotations

import io
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratekeeper import AsyncLimiter, Limit, Limiter, MemoryStore
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit, Request, keys
from ratekeeper.web.addresses import ClientAddress
from ratekeeper.web.asgi import RateLimitMiddleware
from ratekeeper.web.wsgi import RateLimitMiddleware as WSGIMiddleware
from tests.web.asgi_client import get_all

HOUR = Limit(2, 3600, "sliding_log")


def key_of(peer: str, **options: Any) -> str | None:
    return keys.client_ip(**options)(Request("GET", "/", {}, peer))


def test_the_key_is_the_block_in_canonical_form() -> None:
    assert key_of("2001:DB8:1:2::7") == "remote_address:2001:db8:1:2::/64"
    assert key_of("[2001:db8:1:2::7]:443") == "remote_address:2001:db8:1:2::/64"
    assert key_of("2001:db8:1:2::7", ipv6_prefix=48) == "remote_address:2001:db8:1::/48"
    assert key_of("2001:db8:1:2::7", ipv6_prefix=128) == "remote_address:2001:db8:1:2::7"
    assert key_of("203.0.113.7") == "remote_address:203.0.113.7"
    assert key_of("203.0.113.7", ipv4_prefix=24) == "remote_address:203.0.113.0/24"
    assert key_of("::ffff:203.0.113.7", ipv4_prefix=24) == "remote_address:203.0.113.0/24"
    assert key_of("::ffff:203.0.113.7") == "remote_address:203.0.113.7"
    # A peer that is no address (a Unix socket) counts as given.
    assert key_of("unix:/run/app.sock") == "remote_address:unix:/run/app.sock"


def test_proxies_are_trusted_by_address_and_the_client_counted_by_block() -> None:
    address = ClientAddress(["2001:db8:ffff::/48"], ipv6_prefix=56)
    behind = Request(
        "GET", "/", {"x-forwarded-for": "2001:db8:1:2::7, 2001:db8:ffff::2"}, "2001:db8:ffff::1"
    )
    assert address(behind) == "2001:db8:1::/56"
    # A trusted proxy that sends no header is the client: its own block.
    assert address(Request("GET", "/", {}, "2001:db8:ffff::1")) == "2001:db8:ffff::/56"
    # An untrusted peer in a trusted block's neighbourhood is a client, by its block.
    assert address(Request("GET", "/", {"x-forwarded-for": "1.2.3.4"}, "2001:db8:fffe::1")) == (
        "2001:db8:fffe::/56"
    )
    assert "ipv6_prefix=56, ipv4_prefix=32" in repr(address)


@pytest.mark.parametrize(
    "options",
    [
        {"ipv6_prefix": 129},
        {"ipv6_prefix": -1},
        {"ipv6_prefix": float("nan")},
        {"ipv6_prefix": True},
        {"ipv6_prefix": "64"},
        {"ipv4_prefix": 33},
        {"ipv4_prefix": -24},
        {"ipv4_prefix": 24.0},
        {"ipv4_prefix": None},
    ],
)
def test_a_bad_prefix_is_refused_when_the_key_is_built(options: dict[str, Any]) -> None:
    (name,) = options
    with pytest.raises(ValueError, match=f"^{name} is a prefix length, an integer from 0 to"):
        keys.client_ip(**options)


async def home(request: Any) -> PlainTextResponse:
    return PlainTextResponse("home")


def asgi_app(limit: RateLimit) -> Starlette:
    app = Starlette(routes=[Route("/", home)])
    limiter = AsyncLimiter(AsyncMemoryStore(clock=FakeClock()))
    app.add_middleware(RateLimitMiddleware, decider=limiter, limits=[limit])
    return app


def statuses(app: Starlette, peers: list[str]) -> list[int]:
    return [get_all(app, ["/"], peer=peer)[0].status_code for peer in peers]


def test_asgi_two_addresses_of_one_64_share_a_limit() -> None:
    app = asgi_app(RateLimit(HOUR, key=keys.client_ip()))
    peers = ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3", "2001:db8:1:3::1"]
    assert statuses(app, peers) == [200, 200, 429, 200]


def test_asgi_with_blocks_off_each_address_counts_apart() -> None:
    app = asgi_app(RateLimit(HOUR, key=keys.client_ip(ipv6_prefix=128)))
    assert statuses(app, ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2::1"]) == [200] * 3


def test_asgi_an_ipv4_mapped_peer_is_its_ipv4_address() -> None:
    app = asgi_app(RateLimit(HOUR, key=keys.client_ip()))
    assert statuses(app, ["203.0.113.7", "::ffff:203.0.113.7", "203.0.113.7"]) == [200, 200, 429]
    assert statuses(app, ["203.0.113.8"]) == [200]


def echo(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def wsgi_status(app: Any, peer: str) -> int:
    environ: dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": peer}
    setup_testing_defaults(environ)
    environ["wsgi.input"] = io.BytesIO(b"")
    started: list[str] = []
    b"".join(app(environ, lambda status, headers, *info: started.append(status)))
    return int(started[0].split()[0])


def test_wsgi_an_ipv4_24_groups_and_an_ipv6_64_shares() -> None:
    limiter = Limiter(MemoryStore(clock=FakeClock()))
    key = keys.client_ip(ipv4_prefix=24)
    app = WSGIMiddleware(echo, limiter, [RateLimit(HOUR, key=key)])
    peers = ["203.0.113.1", "203.0.113.200", "203.0.113.9", "203.0.114.1"]
    assert [wsgi_status(app, peer) for peer in peers] == [200, 200, 429, 200]
    peers = ["2001:db8:5:6::1", "2001:db8:5:6::2", "2001:db8:5:6::3", "2001:db8:5:7::1"]
    assert [wsgi_status(app, peer) for peer in peers] == [200, 200, 429, 200]
