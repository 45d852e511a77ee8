"""Address blocks: an address counts by the network it lies in, and a bad length is refused."""

from __future__ import annotations

import math

import pytest

from ratekeeper.core.networks import Prefixes, address_of, check_prefix


def test_an_ipv6_address_counts_by_its_64_by_default() -> None:
    blocks = Prefixes()
    assert blocks.key("2001:db8:1:2::5") == "2001:db8:1:2::/64"
    assert blocks.key("2001:DB8:1:2:ffff:ffff:ffff:ffff") == "2001:db8:1:2::/64"
    assert blocks.key("2001:db8:1:3::5") == "2001:db8:1:3::/64"
    # IPv4 is the address itself: /32 is the default.
    assert blocks.key("203.0.113.7") == "203.0.113.7"


def test_other_lengths_group_wider_or_turn_blocks_off() -> None:
    assert Prefixes(ipv6=48).key("2001:db8:1:2::5") == "2001:db8:1::/48"
    assert Prefixes(ipv6=128).key("2001:db8:1:2::5") == "2001:db8:1:2::5"
    assert Prefixes(ipv4=24).key("203.0.113.7") == "203.0.113.0/24"
    assert Prefixes(ipv4=24).key("203.0.114.7") == "203.0.114.0/24"
    assert Prefixes(ipv4=0, ipv6=0).key("203.0.113.7") == "0.0.0.0/0"
    assert Prefixes(ipv4=0, ipv6=0).key("2001:db8::1") == "::/0"


def test_an_ipv4_mapped_address_is_its_ipv4_address() -> None:
    assert Prefixes().key("::ffff:203.0.113.7") == "203.0.113.7"
    assert Prefixes(ipv4=24).key("::ffff:203.0.113.7") == "203.0.113.0/24"
    assert Prefixes(ipv4=24).key("::ffff:cb00:7107") == "203.0.113.0/24"  # the same, in hex
    assert address_of("::ffff:203.0.113.7") == address_of("203.0.113.7")


def test_a_zone_makes_no_second_key() -> None:
    assert Prefixes(ipv6=128).key("fe80::1%eth0") == "fe80::1"
    assert Prefixes(ipv6=128).key("fe80::1%eth1") == "fe80::1"
    assert Prefixes().key("fe80::1%eth0") == "fe80::/64"


def test_a_network_is_widened_never_narrowed() -> None:
    blocks = Prefixes(ipv4=24)
    assert blocks.key("2001:db8:1:2:3::/80") == "2001:db8:1:2::/64"
    assert blocks.key("2001:db8::/32") == "2001:db8::/32"  # wider already: kept
    assert blocks.key("2001:db8:1:2::/64") == "2001:db8:1:2::/64"
    assert blocks.key("203.0.113.7/32") == "203.0.113.0/24"
    assert blocks.key("::ffff:203.0.113.0/120") == "203.0.113.0/24"
    assert Prefixes().key("203.0.113.7/32") == "203.0.113.7"  # full length: the address


@pytest.mark.parametrize(
    "text", ["unknown", "unix:/run/nginx.sock", "", " 203.0.113.7", "203.0.113.7:80", "a/b"]
)
def test_a_value_that_is_no_address_counts_as_given(text: str) -> None:
    assert Prefixes(ipv4=0, ipv6=0).key(text) == text


def test_lengths_are_checked() -> None:
    assert Prefixes.checked() == Prefixes(32, 64)
    assert Prefixes.checked(ipv4=0, ipv6=128) == Prefixes(0, 128)
    assert check_prefix(24, "ipv4_prefix", 32) == 24


@pytest.mark.parametrize(
    ("ipv4", "ipv6", "named"),
    [
        (33, 64, "ipv4_prefix"),
        (-1, 64, "ipv4_prefix"),
        (32, 129, "ipv6_prefix"),
        (32, -64, "ipv6_prefix"),
        (True, 64, "ipv4_prefix"),
        (32, False, "ipv6_prefix"),
        (32, math.nan, "ipv6_prefix"),
        (math.inf, 64, "ipv4_prefix"),
        (24.0, 64, "ipv4_prefix"),
        ("24", 64, "ipv4_prefix"),
        (None, 64, "ipv4_prefix"),
        (32, "/64", "ipv6_prefix"),
    ],
)
def test_a_bad_length_is_refused_by_name(ipv4: object, ipv6: object, named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named} is a prefix length, an integer from 0 to"):
        Prefixes.checked(ipv4, ipv6)
