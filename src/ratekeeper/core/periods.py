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


#: The units a period is written in for a person, longest first, as (seconds, one, several).
_SPOKEN = (
    (31_536_000.0, "year", "years"),
    (2_592_000.0, "month", "months"),
    (604_800.0, "week", "weeks"),
    (86_400.0, "day", "days"),
    (3_600.0, "hour", "hours"),
    (60.0, "minute", "minutes"),
    (1.0, "second", "seconds"),
    (0.001, "ms", "ms"),
)


def spoken(seconds: float) -> str:
    """``seconds`` as a person reads a period, in the longest unit it is a whole number of:
    ``"month"``, ``"15 minutes"``, ``"day"``, ``"90 seconds"``, ``"500 ms"`` (under a second);
    else in seconds (``"1.2345 seconds"``). ``parse_period`` reads every result back as the
    same number, so ``f"{amount}/{spoken(period)}"`` is a rate string ``rates.parse`` reads."""
    for unit, one, several in _SPOKEN:
        multiple = round(seconds / unit)
        if multiple >= 1 and multiple * unit == seconds and (unit >= 1 or seconds < 1):
            return one if multiple == 1 else f"{multiple} {several}"
    short = f"{seconds:g}"
    text = short if "e" not in short and float(short) == seconds else repr(float(seconds))
    return f"{text} seconds" if "e" not in text else f"{seconds:f} seconds"
