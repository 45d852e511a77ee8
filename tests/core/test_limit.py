import pytest

from ratekeeper import Algorithm, InvalidLimitError, Limit, Limiter, MemoryStore
from ratekeeper.testing import FakeClock


def test_defaults_and_derived_values() -> None:
    limit = Limit(10, 60)
    assert limit.algorithm is Algorithm.FIXED_WINDOW
    assert (limit.capacity, limit.rate, limit.interval) == (10, 10 / 60, 6.0)
    assert limit.id == "fixed_window:10/60"


def test_burst_sets_capacity_not_rate() -> None:
    limit = Limit(10, 60, "gcra", burst=3)
    assert (limit.capacity, limit.rate) == (3, 10 / 60)
    assert limit.id == "gcra:10/60:b3"


def test_equal_limits_are_one_key() -> None:
    assert Limit(5, 1, "gcra") == Limit(5, 1.0, Algorithm.GCRA)
    assert hash(Limit(5, 1, "gcra")) == hash(Limit(5, 1.0, "gcra"))
    assert Limit(5, 1, "gcra") != Limit(5, 1, "token_bucket")
    assert Limit(5, 1, "gcra") != Limit(5, 1, "gcra", burst=2)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (Limit(1, 1_234_567), Limit(1, 1_234_568)),  # :g would write both as 1.23457e+06
        (Limit(5, 0.1234567, "gcra"), Limit(5, 0.1234568, "gcra")),
        (Limit(3, 86_400.25), Limit(3, 86_400.3)),
        (
            Limit(10, 60, "bucketed_window", granularity=1.0000001),
            Limit(10, 60, "bucketed_window", granularity=1.0000002),
        ),
    ],
)
def test_limits_apart_in_the_seventh_digit_are_not_one_key(one: Limit, other: Limit) -> None:
    assert one != other
    assert one.id != other.id
    assert repr(one) != repr(other)


def test_limits_apart_in_the_seventh_digit_count_apart() -> None:
    """One limit alternated with a nearly equal one: each still admits its own amount."""
    one, other = Limit(1, 1_234_567), Limit(1, 1_234_568)
    limiter = Limiter(MemoryStore(clock=FakeClock(1_700_000_000.0)))
    assert [limiter.hit("k", limit).allowed for limit in (one, other, one, other, one)] == [
        True,
        True,
        False,
        False,
        False,
    ]


def test_ids_of_round_values_are_short() -> None:
    assert [Limit(10, p).id for p in (60, 0.5, 0.001, 86_400.0, 3_153_600_000)] == [
        "fixed_window:10/60",
        "fixed_window:10/0.5",
        "fixed_window:10/0.001",
        "fixed_window:10/86400",
        "fixed_window:10/3.1536e+09",
    ]


def test_immutable() -> None:
    limit = Limit(1, 1)
    with pytest.raises(AttributeError, match="immutable"):
        limit.amount = 2  # type: ignore[misc]


def test_bucketed_granularity_default_and_id() -> None:
    assert Limit(100, 60, "bucketed_window").bucket == 1.0
    assert Limit(100, 3600, "bucketed_window", granularity=60).id == "bucketed_window:100/3600:g60"


def test_calendar_units() -> None:
    assert Limit(3, 2_592_000, calendar=True).unit == "month"
    assert Limit(3, "1 day", calendar=True).unit == "day"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"amount": 0, "period": 1}, "amount must be an integer from 1 to 9007199254740991, not 0"),
        ({"amount": 1.5, "period": 1}, "amount must be an integer from 1 to .*, not 1.5"),
        ({"amount": True, "period": 1}, "amount must be an integer from 1 to .*, not True"),
        (
            {"amount": 2**53, "period": 1},
            "amount must be an integer from 1 to .*, not 9007199254740992",
        ),
        ({"amount": 1, "period": 0}, r"period must be finite seconds from 0.001 to 3.1536e\+09"),
        ({"amount": 1, "period": -5}, "period must be finite seconds .*, not -5"),
        ({"amount": 1, "period": float("inf")}, "period must be finite seconds .*, not inf"),
        ({"amount": 1, "period": float("nan")}, "period must be finite seconds .*, not nan"),
        ({"amount": 1, "period": 0.0001}, "period must be finite seconds .*, not 0.0001"),
        ({"amount": 1, "period": 1e300}, "period must be finite seconds .*, not 1e"),
        ({"amount": 1, "period": "1.5"}, "invalid period '1.5'"),
        ({"amount": 1, "period": 1, "algorithm": "magic"}, "unknown algorithm 'magic'"),
        ({"amount": 1, "period": 1, "burst": 5}, "burst does not apply to fixed_window"),
        ({"amount": 1, "period": 1, "algorithm": "gcra", "burst": 0}, "burst must be an integer"),
        (
            {"amount": 1, "period": 1, "algorithm": "gcra", "burst": float("inf")},
            "burst must be an integer from 1 to .*, not inf",
        ),
        (
            {
                "amount": 1,
                "period": 60,
                "algorithm": "bucketed_window",
                "granularity": float("nan"),
            },
            "granularity must be finite seconds, not nan",
        ),
        ({"amount": 1, "period": 1, "granularity": 1}, "granularity does not apply"),
        (
            {"amount": 1, "period": 60, "algorithm": "bucketed_window", "granularity": 120},
            "granularity must be positive and at most the period",
        ),
        (
            {"amount": 1, "period": 86400, "algorithm": "bucketed_window", "granularity": 1},
            "makes 86400 buckets per window; at most 3600",
        ),
        ({"amount": 1, "period": 60, "calendar": True}, "calendar windows need a period"),
        (
            {"amount": 1, "period": 86400, "algorithm": "gcra", "calendar": True},
            "calendar does not apply to gcra",
        ),
        ({"amount": 1, "period": 1, "partial": True}, "partial does not apply to fixed_window"),
    ],
)
def test_invalid_parameters(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidLimitError, match=message):
        Limit(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("limit", "text"),
    [
        (Limit(3, "month"), "3/month (fixed_window)"),
        (Limit(3, "month", calendar=True), "3/month (fixed_window)"),
        (Limit(5, "15m", "gcra"), "5/15 minutes (gcra)"),
        (Limit(10, "day"), "10/day (fixed_window)"),
        (Limit(100, 60, "sliding_log"), "100/minute (sliding_log)"),
        (Limit(100, 1), "100/second (fixed_window)"),
        (Limit(7, 90), "7/90 seconds (fixed_window)"),
        (Limit(7, 7_200), "7/2 hours (fixed_window)"),
        (Limit(7, 1_209_600), "7/2 weeks (fixed_window)"),
        (Limit(7, "year"), "7/year (fixed_window)"),
        (Limit(7, 0.5), "7/500 ms (fixed_window)"),
        (Limit(7, 0.001), "7/ms (fixed_window)"),
        (Limit(7, 1.5), "7/1.5 seconds (fixed_window)"),
        (Limit(7, 1_234_567.5), "7/1234567.5 seconds (fixed_window)"),
    ],
)
def test_str_reads_as_a_person_would(limit: Limit, text: str) -> None:
    assert str(limit) == text


@pytest.mark.parametrize(
    "period",
    [
        0.001,
        0.0015,
        0.5,
        1,
        1.5,
        59,
        60,
        61,
        90,
        900,
        3_600,
        86_400,
        604_800,
        2_592_000,
        31_536_000,
        5_184_000,
        1_234_567,
        1_234_568,
        1_234_567.5,
        0.1 + 0.2,
        3_153_600_000,
    ],
)
def test_str_rate_and_repr_read_back_as_the_same_limit(period: float) -> None:
    from ratekeeper.core.rates import parse

    limit = Limit(3, period, "gcra", burst=2)
    rate, _, rest = str(limit).partition(" (")
    assert rest == "gcra)"
    assert parse(rate, "gcra", burst=2) == limit
    assert eval(repr(limit), {"Limit": Limit}) == limit
