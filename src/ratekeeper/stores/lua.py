"""The one Lua script every Redis store runs, and its arguments and reply.

The script is assembled from ``lua/prelude.lua``, the ``.lua`` twin beside each algorithm's
Python module, and ``lua/dispatch.lua``. It applies a batch of hits in one round trip; its
layout is documented in ``dispatch.lua``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from importlib.resources import files
from typing import Any

from ratekeeper.algorithms import Algorithm
from ratekeeper.decision import Decision
from ratekeeper.limit import Limit


def _source() -> str:
    package = files("ratekeeper")
    parts = [package.joinpath("lua/prelude.lua").read_text()]
    parts += [
        package.joinpath(f"algorithms/{algorithm.value}.lua").read_text() for algorithm in Algorithm
    ]
    parts.append(package.joinpath("lua/dispatch.lua").read_text())
    return "\n".join(parts)


SOURCE = _source()


@lru_cache(maxsize=4096)
def limit_args(limit: Limit) -> tuple[str, ...]:
    """A limit's nine fields, as the script reads them; built once per limit."""
    return (
        limit.algorithm.value,
        str(limit.amount),
        repr(limit.period),
        str(limit.capacity),
        repr(limit.rate),
        repr(limit.interval),
        repr(limit.bucket),
        limit.unit,
        "1" if limit.partial else "0",
    )


def arguments(
    hits: Sequence[tuple[Limit, int]], now: float | None, all_or_nothing: bool
) -> list[str]:
    """ARGV for a batch of ``(limit, cost)`` hits: each distinct limit's fields once, then a
    limit index and a cost per hit (layout in ``dispatch.lua``)."""
    index: dict[Limit, str] = {}
    blocks: list[str] = []
    tail: list[str] = []
    for limit, cost in hits:
        number = index.get(limit)
        if number is None:
            number = index[limit] = str(len(index) + 1)
            blocks.extend(limit_args(limit))
        tail.append(number)
        tail.append(str(cost))
    now_arg = "" if now is None else repr(float(now))
    return [now_arg, "1" if all_or_nothing else "0", str(len(index)), *blocks, *tail]


def decisions(reply: Sequence[Any]) -> tuple[float, list[Decision]]:
    """Decode the script's reply into the server's ``now`` and one decision per hit."""
    out = [
        Decision(
            item[0] == 1,
            int(item[1]),
            int(item[2]),
            float(item[3]),
            float(item[4]),
            float(item[5]),
            int(item[6]),
        )
        for item in reply[1:]
    ]
    return float(reply[0]), out
