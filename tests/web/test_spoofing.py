"""A client cannot choose its own address: proxy headers count only from trusted proxies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request as StarletteRequest
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ratekeeper import AsyncLimiter
from ratekeeper.web import RateLimit, Request, keys
from ratekeeper.web.addresses import ClientAddress, forwarded_hops, parse_address
from ratekeeper.web.asgi import RateLimitMiddleware
from tests.web.asgi_client import get_all

TRUSTED = ["10.0.0.0/8", "2001:db8:ffff::/48"]


def address(peer: str | None, header: str = "X-Forwarded-For", **headers: str) -> str:
    seen = Request("GET", "/", {k.lower().replace("_", "-"): v for k, v in headers.items()}, peer)
    return ClientAddress(TRUSTED, header)(seen)


def test_an_untrusted_peer_is_the_client_whatever_it_sends() -> None:
    assert address("203.0.113.7", x_forwarded_for="198.51.100.1") == "203.0.113.7"
    assert address("203.0.113.7", "Forwarded", forwarded="for=198.51.100.1") == "203.0.113.7"
    # A proxy that is not configured is a client like any other.
    assert address("192.0.2.1", x_forwarded_for="198.51.100.1, 10.0.0.9") == "192.0.2.1"


def test_a_trusted_proxy_is_believed_up_to_the_right_most_untrusted_hop() -> None:
    # The client wrote "1.1.1.1"; the proxy 10.0.0.2 appended the peer it saw (198.51.100.9),
    # and 10.0.0.3 appended 10.0.0.2. The right-most untrusted hop is the client.
    chain = "1.1.1.1, 198.51.100.9, 10.0.0.2"
    assert address("10.0.0.3", x_forwarded_for=chain) == "198.51.100.9"
    assert address("10.0.0.3", x_forwarded_for="198.51.100.9") == "198.51.100.9"
    # All hops trusted: the left-most one, the nearest to the client that is known.
    assert address("10.0.0.3", x_forwarded_for="10.0.0.1, 10.0.0.2") == "10.0.0.1"
    # A trusted proxy that sent no header is itself the client.
    assert address("10.0.0.3") == "10.0.0.3"


def test_forwarded_is_read_the_same_way() -> None:
    value = 'for=1.1.1.1, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2;by=10.0.0.3'
    assert address("10.0.0.3", "Forwarded", forwarded=value) == "2001:db8:cafe::/64"
    assert address("10.0.0.3", "Forwarded", forwarded="for=198.51.100.9:80") == "198.51.100.9"
    # Only the header the proxies are said to write is read.
    assert address("10.0.0.3", "Forwarded", x_forwarded_for="198.51.100.9") == "10.0.0.3"
    assert address("10.0.0.3", x_forwarded_for="", forwarded="for=198.51.100.9") == "10.0.0.3"


def test_a_hop_that_is_no_address_stops_at_the_proxy_that_wrote_it() -> None:
    assert address("10.0.0.3", x_forwarded_for="198.51.100.9, unknown") == "10.0.0.3"
    assert address("10.0.0.3", "Forwarded", forwarded='for=1.2.3.4, for="_hidden"') == "10.0.0.3"


def test_addresses_come_out_in_one_form() -> None:
    assert parse_address("::ffff:10.0.0.1") == parse_address("10.0.0.1")
    assert str(parse_address("[2001:DB8::1]:443")) == "2001:db8::1"
    assert parse_address("1.2.3.4:80") == parse_address('"1.2.3.4"')
    assert parse_address("nonsense") is None
    assert forwarded_hops('for="a,b";by=x, proto=http') == ['"a,b"', ""]
    assert address("::ffff:203.0.113.7") == "203.0.113.7"
    # An IPv6 client counts by its /64 (see test_address_blocks.py).
    assert address("2001:db8:ffff::1", x_forwarded_for="2001:db8::5") == "2001:db8::/64"


def test_an_ipv4_mapped_client_is_counted_as_its_ipv4_address() -> None:
    """A dual-stack socket or proxy reports an IPv4 client as ``::ffff:a.b.c.d``: the same
    client, with the same key, as ``a.b.c.d``, however it is written."""
    for peer in ["203.0.113.7", "::ffff:203.0.113.7", "::FFFF:cb00:7107", "[::ffff:203.0.113.7]"]:
        assert address(peer) == "203.0.113.7"
    for hop in ["::ffff:203.0.113.7", "[::ffff:203.0.113.7]:4711", "::ffff:cb00:7107"]:
        assert address("10.0.0.3", x_forwarded_for=f"198.51.100.1, {hop}") == "203.0.113.7"
    forwarded = 'for=198.51.100.1, for="[::ffff:203.0.113.7]:4711"'
    assert address("10.0.0.3", "Forwarded", forwarded=forwarded) == "203.0.113.7"
    mapped = Request("GET", "/", {}, "::ffff:203.0.113.7")
    assert ClientAddress(ipv4_prefix=24)(mapped) == "203.0.113.0/24"


#: What a client may write in the header before the proxy appends its own hop: anything.
JUNK = [
    '"',
    'for="',
    'for=1.2.3.4;x="',
    'for="1.2.3.4',
    'for=1.2.3.4, for="x',
    '"for=1.2.3.4',
    'x="a,b", for=1.2.3.4;by="',
    '\\"',
    "[::1",
    ",,;;",
    "unknown",
    "",
]
HEADER_TEXT = st.text(alphabet='"\\=;,[]:. 0123456789afor', max_size=40)


def behind_the_proxy(junk: str) -> tuple[str, str]:
    """The key of a client at 203.0.113.7 who wrote ``junk`` in each header, which the proxy
    (10.0.0.5, trusted) extended with the client's address: by X-Forwarded-For, by Forwarded."""
    forwarded_for = address("10.0.0.5", x_forwarded_for=f"{junk}, 203.0.113.7")
    forwarded = address("10.0.0.5", "Forwarded", forwarded=f"{junk}, for=203.0.113.7")
    return forwarded_for, forwarded


@pytest.mark.parametrize("junk", JUNK)
def test_a_malformed_header_never_chooses_the_client(junk: str) -> None:
    """Whatever a client writes, however malformed (a quote left open, a stray ``for=``), the
    key is the address the proxy appended: the client can neither choose one, to buy a fresh
    counter, nor be counted as the proxy, sharing one with others."""
    assert behind_the_proxy(junk) == ("203.0.113.7", "203.0.113.7")


@settings(max_examples=300, deadline=None)
@given(HEADER_TEXT)
def test_no_text_a_client_writes_chooses_the_client(junk: str) -> None:
    assert behind_the_proxy(junk) == ("203.0.113.7", "203.0.113.7")


def test_a_proxy_on_a_unix_socket_is_trusted_only_when_named() -> None:
    seen = Request("GET", "/", {"x-forwarded-for": "198.51.100.9"}, None)
    assert ClientAddress(["unix"])(seen) == "198.51.100.9"
    assert ClientAddress([])(seen) == "unknown"


def test_bad_options_raise_when_built() -> None:
    with pytest.raises(ValueError, match="network"):
        ClientAddress(["not-a-network"])
    with pytest.raises(ValueError, match="list"):
        ClientAddress("10.0.0.0/8")
    with pytest.raises(ValueError, match="header"):
        ClientAddress([], header="X-Real-IP")
    with pytest.raises(ValueError, match="header"):
        ClientAddress([], header=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="list of networks"):
        ClientAddress(None)  # type: ignore[arg-type]
    for network in ["", "10.0.0.0/33", None, 5, True]:
        with pytest.raises(ValueError, match="network"):
            ClientAddress([network])  # type: ignore[list-item]


async def whoami(request: StarletteRequest) -> Response:
    return PlainTextResponse("ok")


def test_through_the_middleware_a_spoofing_client_is_still_limited() -> None:
    app = Starlette(routes=[Route("/", whoami)])
    limit = RateLimit("2/hour", key=keys.client_ip(trusted=["10.0.0.0/8"]))
    app.add_middleware(RateLimitMiddleware, decider=AsyncLimiter(), limits=[limit])
    spoofed = [
        {"X-Forwarded-For": f"198.51.100.{n}", "Forwarded": f"for=198.51.100.{n}"} for n in range(4)
    ]

    # From an untrusted peer, a new forged address on each request changes nothing.
    answers = [get_all(app, ["/"], peer="203.0.113.7", headers=h)[0] for h in spoofed]
    assert [a.status_code for a in answers] == [200, 200, 429, 429]

    # Through the trusted proxy, each client's own address counts: the forged part, left of
    # what the proxy appended, is ignored.
    def via_proxy(client: str, forged: str) -> int:
        headers = {"X-Forwarded-For": f"{forged}, {client}"}
        return get_all(app, ["/"], peer="10.0.0.1", headers=headers)[0].status_code

    assert [via_proxy("198.51.100.50", f"1.1.1.{n}") for n in range(3)] == [200, 200, 429]
    assert via_proxy("198.51.100.51", "1.1.1.1") == 200
