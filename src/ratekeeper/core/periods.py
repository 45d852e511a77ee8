"""Periods: ``"5m"``, ``"2 hours"``, ``"day"``, and the units they are written in."""

from __future__ import annotations

import re

from ratekeeper.core.errors import InvalidLimitError

#: Seconds in each unit a period may be written in (a month is 30 days, a year 365).
UNITS: dict[str, float] = {}
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
        UNITS[_name] = _seconds

_PERIOD = re.compile(r"\s*(?P<multiple>\d+(?:\.\d+)?)?\s*(?P<unit>[A-Za-z]+)\s*", re.ASCII)


def parse_period(text: str) -> float:
    """Return the seconds in a period such as ``"5m"``, ``"2 hours"`` or ``"day"``.

    Raises ``InvalidLimitError`` naming the bad part.
    """
    match = _PERIOD.fullmatch(text)
    if match is None:
        raise InvalidLimitError(f"invalid period {text!r}; expected e.g. '30s', '5m', 'day'")
    return period_of(match, text)


def period_of(match: re.Match[str], text: str) -> float:
    unit = match["unit"].lower()
    if unit not in UNITS:
        raise InvalidLimitError(
            f"unknown unit {match['unit']!r} in {text!r}; expected one of "
            "ms, second, minute, hour, day, week, month, year (or s, m, h, d, w, mo, y)"
        )
    multiple = float(match["multiple"]) if match["multiple"] else 1.0
    if multiple <= 0:
        raise InvalidLimitError(f"period must be positive in {text!r}")
    return multiple * UNITS[unit]
