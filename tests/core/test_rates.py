import pytest

from ratekeeper import (
    Algorithm,
    InvalidLimitError,
    Limit,
    Limiter,
    MemoryStore,
    parse,
    parse_many,
    parse_period,
)
from ratekeeper.core.rates import cached
from ratekeeper.limiter import RATES
from ratekeeper.testing import FakeClock


@pytest.mark.parametrize(
    ("text", "amount", "period"),
    [
        ("5/second", 5, 1.0),
        ("5/s", 5, 1.0),
        ("100 per minute", 100, 60.0),
        ("100 PER Minute", 100, 60.0),
        ("10/5m", 10, 300.0),
        ("10/5 minutes", 10, 300.0),
        ("10 per 2 hours", 10, 7200.0),
        ("3/month", 3, 2_592_000.0),
        ("1/year", 1, 31_536_000.0),
        ("7/week", 7, 604_800.0),
        ("2/day", 2, 86_400.0),
        ("50/500ms", 50, 0.5),
        ("  8 / 1.5s  ", 8, 1.5),
    ],
)
def test_parse_one(text: str, amount: int, period: float) -> None:
    limit = parse(text)
    assert (limit.amount, limit.period, limit.algorithm) == (amount, period, Algorithm.FIXED_WINDOW)


def test_parse_many_keeps_order_and_applies_algorithm_and_params() -> None:
    limits = parse_many("1000/day; 50/minute", "token_bucket", burst=10)
    assert [(one.amount, one.period) for one in limits] == [(1000, 86_400.0), (50, 60.0)]
    assert {one.algorithm for one in limits} == {Algorithm.TOKEN_BUCKET}
    assert {one.capacity for one in limits} == {10}


def test_parse_many_accepts_commas_and_trailing_separator() -> None:
    assert len(parse_many("1/second, 10/minute;")) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty rate ''"),
        (" ; ", "empty rate"),
        ("5/fortnight", "unknown unit 'fortnight' in '5/fortnight'"),
        ("five/second", "invalid amount 'five' in 'five/second'"),
        ("0/second", "invalid amount '0' in '0/second'"),
        ("-1/second", "invalid amount '-1'"),
        ("10", "invalid rate '10'"),
        ("10/", "invalid rate '10/'"),
        ("10/0m", "period must be positive in '10/0m'"),
        ("1000/day; 50/minuet", "unknown unit 'minuet' in '50/minuet'"),
        # Digits are 0-9: str.isdigit() also takes '²', which int() cannot read.
        ("²/minute", "invalid amount '²' in '²/minute'"),
        ("\u0661\u0660/minute", "invalid amount '\u0661\u0660'"),
        ("10/\u0665m", "invalid rate '10/\u0665m'"),
        ("1_000/minute", "invalid amount '1_000'"),
    ],
)
def test_bad_strings_name_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(InvalidLimitError, match=message.replace("(", r"\(")):
        parse_many(text)


def test_parse_wants_exactly_one() -> None:
    with pytest.raises(InvalidLimitError, match="expected one limit, got 2"):
        parse("1/second; 2/minute")


def test_not_a_string() -> None:
    with pytest.raises(InvalidLimitError, match="must be a string"):
        parse_many(10)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30.0), ("5m", 300.0), ("day", 86_400.0)])
def test_parse_period(text: str, seconds: float) -> None:
    assert parse_period(text) == seconds


def test_parse_period_rejects_garbage() -> None:
    with pytest.raises(InvalidLimitError, match="invalid period '5 m m'"):
        parse_period("5 m m")
    with pytest.raises(InvalidLimitError, match="invalid period '\u0665m'"):
        parse_period("\u0665m")


def test_invalid_limit_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown unit"):
        parse("1/eon")


def test_limit_accepts_a_period_string() -> None:
    assert Limit(10, "5m") == Limit(10, 300)


@pytest.mark.parametrize("algorithm", [a for a in Algorithm if a is not Algorithm.CONCURRENCY])
def test_a_rate_string_is_parsed_once_per_algorithm_and_decides_as_its_limit(
    algorithm: Algorithm,
) -> None:
    first = cached("3/second; 5/minute", algorithm)
    assert cached("3/second; 5/minute", algorithm) is first  # the same objects: not rebuilt
    assert [(one.amount, one.period, one.algorithm) for one in first] == [
        (3, 1.0, algorithm),
        (5, 60.0, algorithm),
    ]
    clock = FakeClock(1000.0)
    by_string = Limiter(MemoryStore(clock=clock), algorithm=algorithm)
    by_limit = Limiter(MemoryStore(clock=clock), algorithm=algorithm)
    limit = Limit(3, 1.0, algorithm)
    decided = []
    for step in range(12):
        clock.advance(0.125 * (step % 3))
        string = by_string.hit("k", "3/second")
        given = by_limit.hit("k", limit)
        decided.append((string.allowed, string.remaining, given.allowed, given.remaining))
    assert [d[:2] for d in decided] == [d[2:] for d in decided]
    assert any(not d[0] for d in decided) and any(d[0] for d in decided)


def test_a_limiter_keeps_a_bounded_number_of_rate_strings_parsed() -> None:
    limiter = Limiter(MemoryStore(clock=FakeClock(0.0)), algorithm="token_bucket")
    for amount in range(1, RATES * 2 + 2):
        decision = limiter.hit(f"k{amount}", f"{amount}/minute")
        assert (decision.allowed, decision.limit, decision.remaining) == (True, amount, amount - 1)
    assert len(limiter._rates) <= RATES
    with pytest.raises(InvalidLimitError):
        limiter.hit("k", ["10/minute"])  # type: ignore[arg-type]
    with pytest.raises(InvalidLimitError):
        limiter.peek("k", "ten/minute")
