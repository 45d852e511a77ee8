"""Rate strings: ``"5/second"``, ``"100 per minute"``, ``"10/5m"``, ``"1000/day; 50/minute"``."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ratekeeper.core.errors import InvalidLimitError
from ratekeeper.core.inputs import decimal
from ratekeeper.core.limits import Limit
from ratekeeper.core.periods import period_of
from ratekeeper.core.registry import Algorithm

_ITEM = re.compile(
    r"""\s*(?P<amount>\S+?)\s*(?:/|\s+per\s+)\s*
        (?P<multiple>\d+(?:\.\d+)?)?\s*(?P<unit>[A-Za-z]+)\s*""",
    re.VERBOSE | re.IGNORECASE | re.ASCII,  # digits are 0-9 only, as int() must read them
)


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
        limits.append(Limit(int(amount), period_of(match, part.strip()), algorithm, **params))
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
