"""Address blocks: an address counted by the network it belongs to, not one by one.

A provider hands an IPv6 client a whole /64 at least (2^64 addresses), so a limit per address
is a limit per address that client chooses to use. ``Prefixes`` says how long a block is for
each family: by default /64 for IPv6 and /32 (the address itself) for IPv4. ``Prefixes.key``
turns a value into the text it is counted under:

- an address becomes its block in canonical form (``2001:db8:1:2::5`` is
  ``2001:db8:1:2::/64``); at the full length (/32, /128) it stays the address itself
  (``203.0.113.7``), so that turning blocks off keeps the keys an address always had;
- an IPv4-mapped IPv6 address (``::ffff:203.0.113.7``) is its IPv4 address, and an IPv6
  zone (``fe80::1%eth0``) is dropped, so that one client has one key;
- a network (``2001:db8:1::/48``, which a gateway or another ratekeeper may already have sent)
  is widened to the block it lies in, never narrowed (``::ffff:203.0.113.0/120`` is
  ``203.0.113.0/24``);
- anything else (``unknown``, a Unix socket's path) is counted as given: the key it would have
  had without blocks, so that it can neither fail nor win capacity.

Example::

    Prefixes(ipv4=24).key("203.0.113.7")  # "203.0.113.0/24"
"""

from __future__ import annotations

import ipaddress
from typing import Any, NamedTuple

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The default block of each family: IPv4's address itself, and the /64 of IPv6.
IPV4_PREFIX = 32
IPV6_PREFIX = 64
IPV4_BITS = 32
IPV6_BITS = 128
#: The length of ``::ffff:0:0/96``, the IPv6 block that maps IPv4's addresses.
_MAPPED_BITS = 96


def check_prefix(value: Any, name: str, bits: int) -> int:
    """``value`` if it is a prefix length from 0 to ``bits`` (an ``int``, not a ``bool``); else
    ``ValueError`` naming ``name``."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= bits:
        return int(value)
    raise ValueError(f"{name} is a prefix length, an integer from 0 to {bits}, not {value!r}")


def address_of(text: str) -> Address | None:
    """The address ``text`` is (``203.0.113.7``, ``2001:db8::1``), in the form that has one
    key per client: IPv4-mapped IPv6 as IPv4, without an IPv6 zone. None when it is none."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.scope_id is not None:
            return ipaddress.IPv6Address(int(address))
    return address


class Prefixes(NamedTuple):
    """The block length of each family; build one with ``Prefixes.checked`` to validate it."""

    ipv4: int = IPV4_PREFIX
    ipv6: int = IPV6_PREFIX

    @classmethod
    def checked(cls, ipv4: Any = IPV4_PREFIX, ipv6: Any = IPV6_PREFIX) -> Prefixes:
        """``Prefixes(ipv4, ipv6)``, or ``ValueError`` when either is no prefix length of its
        family (``ipv4_prefix`` 0 to 32, ``ipv6_prefix`` 0 to 128)."""
        return cls(
            check_prefix(ipv4, "ipv4_prefix", IPV4_BITS),
            check_prefix(ipv6, "ipv6_prefix", IPV6_BITS),
        )

    def of(self, address: Address) -> str:
        """The key of ``address``: its block, or itself at its family's full length."""
        if isinstance(address, ipaddress.IPv4Address):
            if self.ipv4 == IPV4_BITS:
                return str(address)
            return str(ipaddress.IPv4Network((int(address), self.ipv4), strict=False))
        if self.ipv6 == IPV6_BITS:
            return str(address)
        return str(ipaddress.IPv6Network((int(address), self.ipv6), strict=False))

    def key(self, text: str) -> str:
        """The text ``text`` counts under: see the module's description."""
        address = address_of(text)
        if address is not None:
            return self.of(address)
        if "/" not in text:
            return text
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            return text
        if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= _MAPPED_BITS:
            mapped = network.network_address.ipv4_mapped
            if mapped is not None:
                network = ipaddress.IPv4Network((mapped, network.prefixlen - _MAPPED_BITS))
        prefix = self.ipv4 if network.version == 4 else self.ipv6
        if network.prefixlen > prefix:
            network = network.supernet(new_prefix=prefix)
        if network.prefixlen == network.max_prefixlen:
            return str(network.network_address)  # a /32 or /128 is the address, as ``of`` has it
        return str(network)
