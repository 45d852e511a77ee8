"""The limits the chaos cases count under, and the bound a degraded instance keeps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.chaos.fleet import INSTANCES

#: The hot key's limit: a sliding log over an hour, so that every admission of a case (which
#: lasts well under an hour) counts against the one limit, wherever it falls.
HOT = 60
#: Never reached: a key under it shows only whether its decision was exact or degraded.
NEVER = 1_000_000
#: The most a degraded instance admits of a limit per window: its share of the fleet's.
SHARE = HOT // INSTANCES


def limit(capacity: int) -> dict[str, Any]:
    return {"capacity": capacity, "time_window_sec": 3600, "algorithm": "sliding_log"}


def check(key: str, capacity: int) -> dict[str, Any]:
    return {"key": key, "limit": limit(capacity)}


def mixed(hot: str, background: list[str]) -> Callable[[int], dict[str, Any]]:
    """The checks of a load: every fourth on ``hot`` (limited to ``HOT``), the others on each
    of ``background`` in turn (never limited)."""

    def checks(n: int) -> dict[str, Any]:
        if n % 4 == 0:
            return check(hot, HOT)
        return check(background[(n - n // 4 - 1) % len(background)], NEVER)

    return checks
