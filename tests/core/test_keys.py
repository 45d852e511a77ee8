"""Keys: one layout, a hash tag user input cannot break, no collisions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratekeeper import Limit
from ratekeeper.algorithms import Algorithm
from ratekeeper.core.store_keys import MAX_IDENTITY, bounded, escape, identity, limit_tag, state_key
from tests.strategies import limits

LIMIT = Limit(10, 60, "gcra", burst=3)


def test_layout_by_limit() -> None:
    assert state_key(LIMIT, "user:1") == "rk:3:{g10/60,b3:user:1}"


def test_layout_by_identity() -> None:
    assert state_key(LIMIT, "user:1", "app", "identity") == "app:3:{user:1}:g10/60,b3"


@pytest.mark.parametrize("identity", ["{x}", "a}b{c", "}{", "{", "%7B"])
def test_identity_cannot_break_the_hash_tag(identity: str) -> None:
    key = state_key(LIMIT, identity)
    assert key.count("{") == 1 and key.count("}") == 1
    assert key.index("{") < key.index("}")


def test_long_identities_are_hashed() -> None:
    long = "x" * (MAX_IDENTITY + 1)
    assert escape(long).startswith("#") and len(escape(long)) == 65
    assert escape("x" * MAX_IDENTITY) == "x" * MAX_IDENTITY
    assert escape("#abc") == "%23abc"  # never mistaken for a hashed identity


def test_long_engine_identities_are_bounded() -> None:
    assert identity("api", "user:1") == "api/user:1"
    assert identity("api", "x" * (MAX_IDENTITY - 4)) == "api/" + "x" * (MAX_IDENTITY - 4)
    long = identity("api", "x" * MAX_IDENTITY)
    assert long.startswith("#") and len(long) == 65 and "/" not in long
    assert long != identity("api", "x" * (MAX_IDENTITY + 1)) != identity("ap", "x" * 300)
    assert bounded("\ud800" * 300).startswith("#")  # a lone surrogate hashes too


@given(st.text(max_size=300), st.text(max_size=300))
def test_distinct_identities_never_share_a_key(one: str, two: str) -> None:
    if one != two:
        assert state_key(LIMIT, one) != state_key(LIMIT, two)
        assert state_key(LIMIT, one, tag="identity") != state_key(LIMIT, two, tag="identity")


def test_an_identity_cannot_reach_another_limit() -> None:
    # Without escaping, "b3:x" under gcra:10/60 would read as identity "x" under gcra:10/60:b3.
    plain = Limit(10, 60, "gcra")
    assert state_key(plain, "b3:x") != state_key(LIMIT, "x")


@given(st.data())
def test_distinct_limits_never_share_a_tag(data: st.DataObject) -> None:
    one = data.draw(limits(data.draw(st.sampled_from(list(Algorithm)))))
    two = data.draw(limits(data.draw(st.sampled_from(list(Algorithm)))))
    assert (limit_tag(one) == limit_tag(two)) == (one == two)
    assert ":" not in limit_tag(one)  # so the first ':' of a hash tag ends the limit's part


def test_every_algorithm_has_its_own_letter() -> None:
    tags = {limit_tag(Limit(10, 60, algorithm)) for algorithm in Algorithm}
    assert len({tag[0] for tag in tags}) == len(Algorithm)


@given(st.text(max_size=300))
def test_escaping_is_percent_encoding_of_the_special_characters(identity: str) -> None:
    if len(identity) > MAX_IDENTITY:
        return
    plain = identity.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    assert escape(identity) == ("%23" + plain[1:] if plain.startswith("#") else plain)
