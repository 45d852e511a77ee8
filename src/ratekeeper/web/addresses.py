"""The client's address, which a client cannot choose.

The peer of a connection is the client unless it is one of the configured trusted proxies.
Only then is the proxy's header read (``X-Forwarded-For`` by default, or RFC 7239's
``Forwarded``), from right to left: each hop was written by the one after it, so the walk stops
at the first hop that is not a trusted proxy, and that hop is the client. Whatever a client
writes itself sits to the left of it and is never read, however malformed: ``Forwarded``'s
quotes are paired from the right, so a quote the client left open cannot reach into what the
proxies appended. A hop that is not an address (``unknown``, an obfuscated name) stops the
walk at the proxy that wrote it.

Addresses come out in their normal form (``::ffff:10.0.0.1`` is ``10.0.0.1``; ports, brackets,
quotes and IPv6 zones are dropped), so one client has one key. ``"unix"`` among the trusted
networks trusts a peer without an address: a proxy on a Unix socket.

The key is the client's address block (``ratekeeper.core.networks``): its /64 for IPv6 by
default (``2001:db8:1:2::/64``), since a client holding a /64 holds every address in it, and
the address itself for IPv4 (its /32), unless ``ipv6_prefix`` and ``ipv4_prefix`` say
otherwise. Trusted proxies are still matched address by address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from functools import lru_cache

from ratekeeper.core.networks import (
    IPV4_PREFIX,
    IPV6_PREFIX,
    Address,
    Network,
    Prefixes,
    address_of,
)
from ratekeeper.web.request import Request

#: The proxy headers a ``ClientAddress`` can read.
HEADERS = ("x-forwarded-for", "forwarded")
#: The key of a peer whose address is not known and is no trusted proxy.
UNKNOWN = "unknown"
#: How many peers' parsed addresses are remembered: parsing is the dearest part of a key.
CACHED_PEERS = 4096


def parse_address(text: str | None) -> Address | None:
    """The address in ``text`` (``1.2.3.4``, ``1.2.3.4:80``, ``[::1]:80``, ``"[::1]"``), or
    None when there is none."""
    if not text:
        return None
    text = text.strip().strip('"')
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else text[1:]
    elif text.count(":") == 1:  # IPv4 with a port; a bare IPv6 address has several colons
        text = text.split(":", 1)[0]
    return address_of(text)


@lru_cache(maxsize=CACHED_PEERS)
def _peer(text: str | None) -> Address | None:
    """``parse_address`` of a connection's peer, remembered: a client comes back."""
    return parse_address(text)


@lru_cache(maxsize=CACHED_PEERS)
def _peer_key(text: str, prefixes: Prefixes) -> str:
    """The key of a peer that is no trusted proxy: its address's block, else itself."""
    address = parse_address(text)
    return text if address is None else prefixes.of(address)


@lru_cache(maxsize=CACHED_PEERS)
def _client_key(address: Address, prefixes: Prefixes) -> str:
    """The key of a client found behind trusted proxies: its block, remembered (making the
    network of an IPv6 address costs tens of times more than finding it here)."""
    return prefixes.of(address)


def forwarded_hops(value: str) -> list[str]:
    """The ``for`` of each element of a ``Forwarded`` header, in order; ``""`` for an element
    without one. Commas and semicolons inside quoted strings are kept. Quotes are paired from
    the right, where the proxies wrote: a quote a client leaves open, to the left of what they
    appended, cannot join their elements to its own (nor choose its ``for``)."""
    hops: list[str] = []
    for element in _split_right(value, ","):
        found = ""
        for pair in _split_right(element, ";"):
            name, _, text = pair.partition("=")
            if name.strip().lower() == "for":
                found = text.strip()
        hops.append(found)
    return hops


def _split_right(value: str, separator: str) -> list[str]:
    """``value`` split at each ``separator`` outside quotes, the quotes paired from its end."""
    return [part[::-1] for part in reversed(_split(value[::-1], separator))]


def _split(value: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for char in value:
        if char == '"':
            quoted = not quoted
        if char == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


class ClientAddress:
    """A key function: the client's address block, honouring ``header`` only from ``trusted``.

    ``trusted`` holds networks (``"10.0.0.0/8"``, ``"127.0.0.1"``, ``"::1"``, ``"unix"``);
    ``header`` is the one the proxies set, ``"X-Forwarded-For"`` or ``"Forwarded"``: name the
    one your proxy writes, since a header it passes through untouched is the client's own.
    ``ipv6_prefix`` (0 to 128, default 64) and ``ipv4_prefix`` (0 to 32, default 32) are the
    lengths of the blocks a client is counted by; 128 and 32 count each address apart. A bad
    network, header or prefix raises ``ValueError`` here. Example::

        address = ClientAddress(trusted=["10.0.0.0/8"])
        address(request)  # "203.0.113.7", or "2001:db8:1:2::/64" for 2001:db8:1:2::7
    """

    def __init__(
        self,
        trusted: Iterable[str] = (),
        header: str = "X-Forwarded-For",
        *,
        ipv6_prefix: int = IPV6_PREFIX,
        ipv4_prefix: int = IPV4_PREFIX,
    ) -> None:
        self.prefixes = Prefixes.checked(ipv4_prefix, ipv6_prefix)
        if isinstance(trusted, str) or not isinstance(trusted, Iterable):
            raise ValueError(f"trusted is a list of networks, not {trusted!r}")
        networks: list[Network] = []
        self.unix = False
        for network in trusted:
            if network == "unix":
                self.unix = True
                continue
            if not isinstance(network, str | Address | Network):
                raise ValueError(f"not a trusted proxy network: {network!r}")
            try:
                networks.append(ipaddress.ip_network(network, strict=False))
            except (TypeError, ValueError):
                raise ValueError(f"not a trusted proxy network: {network!r}") from None
        self.networks = tuple(networks)
        self.header = header.lower() if isinstance(header, str) else header
        if self.header not in HEADERS:
            raise ValueError(f"header is 'X-Forwarded-For' or 'Forwarded', not {header!r}")
        self._direct = not self.networks and not self.unix  # no proxy: the peer is the client

    def __repr__(self) -> str:
        trusted = [str(network) for network in self.networks] + (["unix"] if self.unix else [])
        ipv4, ipv6 = self.prefixes
        return (
            f"ClientAddress(trusted={trusted!r}, header={self.header!r}, "
            f"ipv6_prefix={ipv6}, ipv4_prefix={ipv4})"
        )

    def trusts(self, address: Address) -> bool:
        """Whether ``address`` is one of the trusted proxies."""
        return any(address in network for network in self.networks)

    def __call__(self, request: Request) -> str:
        if self._direct:
            return _peer_key(request.client, self.prefixes) if request.client else UNKNOWN
        peer = _peer(request.client)
        if peer is None and not (self.unix and not request.client):
            return str(request.client or UNKNOWN)
        if peer is not None and not self.trusts(peer):
            return _client_key(peer, self.prefixes)
        value = request.header(self.header)
        if not value:
            return _client_key(peer, self.prefixes) if peer is not None else UNKNOWN
        hops = forwarded_hops(value) if self.header == "forwarded" else value.split(",")
        client = peer
        for hop in reversed(hops):
            address = parse_address(hop)
            if address is None:
                break
            client = address
            if not self.trusts(address):
                break
        return _client_key(client, self.prefixes) if client is not None else UNKNOWN
