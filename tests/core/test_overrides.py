"""Override: validation with exact messages, and the JSON round trip the stores rely on."""

from __future__ import annotations

from typing import Any

import pytest

from ratekeeper.core.errors import ConfigError
from ratekeeper.core.limits import Limit
from ratekeeper.core.overrides import Override

FIELDS = "capacity, time_window_sec, algorithm, granularity, burst, sync"


def test_an_override_naming_no_algorithm_is_a_fixed_window_as_a_limit_and_a_rule_are() -> None:
    override = Override.from_dict({"time_window_sec": 1, "capacity": 5})
    assert override.limit == Limit(5, 1) == Limit(5, 1, "fixed_window")
    assert Override(5, 1).limit == Limit(5, 1)
    assert override.to_dict()["algorithm"] == "fixed_window"  # written down when stored


def test_an_override_giving_only_a_granularity_is_a_bucketed_window() -> None:
    override = Override.from_dict({"time_window_sec": 60, "capacity": 5, "granularity": 2})
    assert override.limit == Limit(5, 60, "bucketed_window", granularity=2)
    assert Override(5, 60, granularity=2) == override


@pytest.mark.parametrize(
    ("stored", "limit"),
    [
        # What ratekeeper has always written: the algorithm named, read back as it was.
        (
            '{"algorithm":"bucketed_window","capacity":5,"time_window_sec":1}',
            Limit(5, 1, "bucketed_window"),
        ),
        (
            '{"algorithm":"bucketed_window","capacity":5,"granularity":0.5,"time_window_sec":1}',
            Limit(5, 1, "bucketed_window", granularity=0.5),
        ),
        ('{"algorithm":"gcra","capacity":5,"time_window_sec":1}', Limit(5, 1, "gcra")),
        # Written by hand without one: a fixed window now (a bucketed window before).
        ('{"capacity":5,"time_window_sec":1}', Limit(5, 1, "fixed_window")),
    ],
)
def test_a_stored_override_reads_back_with_its_algorithm(stored: str, limit: Limit) -> None:
    assert Override.from_json(stored).limit == limit


@pytest.mark.parametrize(
    "data",
    [
        {"time_window_sec": 1, "capacity": 5},
        {"time_window_sec": 1.5, "capacity": 7, "algorithm": "gcra", "burst": 3},
        {"time_window_sec": "5m", "capacity": 100, "algorithm": "token_bucket"},
        {"time_window_sec": 60, "capacity": 10, "granularity": 5},
        {"time_window_sec": 86_400, "capacity": 1, "algorithm": "fixed_window"},
    ],
)
def test_round_trip(data: dict[str, Any]) -> None:
    override = Override.from_dict(data)
    assert Override.from_dict(override.to_dict()) == override
    assert Override.from_json(override.to_json()) == override
    assert hash(Override.from_json(override.to_json())) == hash(override)


def test_json_form_is_compact_and_sorted() -> None:
    override = Override.from_dict({"time_window_sec": "5m", "capacity": 5, "algorithm": "gcra"})
    assert override.to_json() == '{"algorithm":"gcra","capacity":5,"time_window_sec":300}'
    assert override.to_dict() == {"capacity": 5, "time_window_sec": 300, "algorithm": "gcra"}


def test_a_default_granularity_is_not_written_down() -> None:
    override = Override.from_dict({"time_window_sec": 60, "capacity": 5})
    assert override.to_dict() == {
        "capacity": 5,
        "time_window_sec": 60,
        "algorithm": "fixed_window",
    }
    given = Override.from_dict({"time_window_sec": 60, "capacity": 5, "granularity": 2})
    assert given.to_dict()["granularity"] == 2
    assert given != override


def test_fractional_window_stays_fractional() -> None:
    override = Override.from_dict({"time_window_sec": 0.5, "capacity": 1, "algorithm": "gcra"})
    assert override.to_dict()["time_window_sec"] == 0.5


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], f"rules: user:1: must be a map of {FIELDS}"),
        ({"capacity": 5}, "rules: user:1: missing time_window_sec"),
        ({}, "rules: user:1: missing capacity and time_window_sec"),
        (
            {"capacity": 5, "time_window_sec": 1, "window": 2},
            f"rules: user:1: unknown field 'window'; expected some of: {FIELDS}",
        ),
        (
            {"capacity": 0, "time_window_sec": 1},
            "rules: user:1: capacity must be a positive integer, not 0",
        ),
        (
            {"capacity": True, "time_window_sec": 1},
            "rules: user:1: capacity must be a positive integer, not True",
        ),
        (
            {"capacity": 5, "time_window_sec": -1},
            "rules: user:1: time_window_sec must be positive seconds or a period such as '5m', "
            "not -1",
        ),
        (
            {"capacity": 5, "time_window_sec": float("inf")},
            "rules: user:1: time_window_sec must be positive seconds or a period such as '5m', "
            "not inf",
        ),
        (
            {"capacity": 5, "time_window_sec": 1, "window": 2, "cap": 1},
            f"rules: user:1: unknown fields 'cap', 'window'; expected some of: {FIELDS}",
        ),
        (
            {"capacity": 5, "time_window_sec": 1, "burst": 2},
            "rules: user:1: burst does not apply to fixed_window",
        ),
    ],
)
def test_invalid_data_names_where_and_what(data: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Override.from_dict(data, "rules: user:1")
    assert str(caught.value) == message
    assert caught.value.errors == [message]


def test_unknown_algorithm_lists_the_known() -> None:
    with pytest.raises(ConfigError, match=r"^override: unknown algorithm 'magic'; expected one of"):
        Override.from_dict({"capacity": 5, "time_window_sec": 1, "algorithm": "magic"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "override: not valid JSON: Expecting property name enclosed in double quotes"),
        ("[1]", f"override: must be a map of {FIELDS}"),
        ("null", f"override: must be a map of {FIELDS}"),
        (
            '{"capacity": 5, "time_window_sec": Infinity}',
            "override: time_window_sec must be positive seconds or a period such as '5m', not inf",
        ),
    ],
)
def test_invalid_json(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Override.from_json(text)
    assert str(caught.value).startswith(message)


def test_immutable() -> None:
    override = Override(5, 1)
    with pytest.raises(AttributeError, match="Override is immutable; cannot set 'limit'"):
        override.limit = Limit(1, 1)
