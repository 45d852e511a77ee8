"""Rate strings: ``"5/second"``, ``"100 per minute"``, ``"10/5m"``, ``"1000/day; 50/minute"``."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ratekeeper.algorithms import Algorithm
from ratekeeper.errors import InvalidLimitError
from ratekeeper.inputs import decimal
from ratekeeper.limit import Limit

_UNITS: dict[str, float] = {}
for _names, _seconds in (
    (("ms", "msec", "millisecond", "milliseconds"), 0.001),
    (("s", "sec", "secs", "second", "seconds"), 1.0),
    (("m", "min", "mins", "minute", "minutes"), 60.0),
    (("h", "hr", "hrs", "hour", "hours"), 3_600.0),
    (("d", "day", "days"), 86_400.0),
    (("w", "wk", "week", "weeks"), 604_800.0),
    (("mo", "month", "months"), 2_592_000.0),
    (("y", "yr", "year", "years"), 31_536_000.0),
):
    for _name in _names:
        _UNITS[_name] = _seconds

_ITEM = re.compile(
    r"""\s*(?P<amount>\S+?)\s*(?:/|\s+per\s+)\s*
        (?P<multiple>\d+(?:\.\d+)?)?\s*(?P<unit>[A-Za-z]+)\s*""",
    re.VERBOSE | re.IGNORECASE | re.ASCII,  # digits are 0-9 only, as int() must read them
)
_PERIOD = re.compile(r"\s*(?P<multiple>\d+(?:\.\d+)?)?\s*(?P<unit>[A-Za-z]+)\s*", re.ASCII)


def parse_period(text: str) -> float:
    """Return the seconds in a period such as ``"5m"``, ``"2 hours"`` or ``"day"``.

    Raises ``InvalidLimitError`` naming the bad part.
    """
    match = _PERIOD.fullmatch(text)
    if match is None:
        raise InvalidLimitError(f"invalid period {text!r}; expected e.g. '30s', '5m', 'day'")
    return _period(match, text)


def _period(match: re.Match[str], text: str) -> float:
    unit = match["unit"].lower()
    if unit not in _UNITS:
        raise InvalidLimitError(
            f"unknown unit {match['unit']!r} in {text!r}; expected one of "
            "ms, second, minute, hour, day, week, month, year (or s, m, h, d, w, mo, y)"
        )
    multiple = float(match["multiple"]) if match["multiple"] else 1.0
    if multiple <= 0:
        raise InvalidLimitError(f"period must be positive in {text!r}")
    return multiple * _UNITS[unit]


def parse_many(
    text: str, algorithm: Algorithm | str = Algorithm.FIXED_WINDOW, **params: Any
) -> list[Limit]:
    """Parse one or more limits separated by ``;`` or ``,``.

    Every limit gets ``algorithm`` and the keyword ``params`` of ``Limit`` (``burst``,
    ``granularity``, ``calendar``, ``partial``). Raises ``InvalidLimitError`` naming the bad
    part. Example::

        parse_many("1000/day; 50/minute", "gcra")
    """
    if not isinstance(text, str):
        raise InvalidLimitError(f"a rate must be a string such as '10/minute', not {text!r}")
    parts = [part for part in re.split(r"[;,]", text) if part.strip()]
    if not parts:
        raise InvalidLimitError(f"empty rate {text!r}; expected e.g. '10/minute'")
    limits = []
    for part in parts:
        match = _ITEM.fullmatch(part)
        if match is None:
            raise InvalidLimitError(
                f"invalid rate {part.strip()!r}; expected '<amount>/<period>', "
                "e.g. '5/second', '100 per minute' or '10/5m'"
            )
        amount = match["amount"]
        if not decimal(amount) or int(amount) < 1:
            raise InvalidLimitError(
                f"invalid amount {amount!r} in {part.strip()!r}; expected a positive integer"
            )
        limits.append(Limit(int(amount), _period(match, part.strip()), algorithm, **params))
    return limits


def parse(text: str, algorithm: Algorithm | str = Algorithm.FIXED_WINDOW, **params: Any) -> Limit:
    """Parse exactly one limit, e.g. ``parse("10/5m", "token_bucket", burst=20)``."""
    limits = parse_many(text, algorithm, **params)
    if len(limits) != 1:
        raise InvalidLimitError(f"expected one limit, got {len(limits)} in {text!r}")
    return limits[0]


@lru_cache(maxsize=1024)
def cached(text: str, algorithm: Algorithm = Algorithm.FIXED_WINDOW) -> tuple[Limit, ...]:
    """Parse a rate string once per algorithm; used where strings are passed on the hot path
    (a ``Limit`` costs microseconds to build, a cached one about a tenth of one)."""
    return tuple(parse_many(text, algorithm))
