"""The one Lua script every Redis store runs, and its arguments and reply.

The script is assembled from ``lua/prelude.lua``, the ``.lua`` twin beside each algorithm's
Python module, and ``lua/dispatch.lua``. It applies a batch of hits in one round trip; its
layout is documented in ``dispatch.lua``.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from typing import Any

from ratekeeper.algorithms import Algorithm
from ratekeeper.decision import Decision
from ratekeeper.limit import Limit

#: Arguments per hit after the two leading ones (now, all_or_nothing).
FIELDS = 10


def _source() -> str:
    package = files("ratekeeper")
    parts = [package.joinpath("lua/prelude.lua").read_text()]
    parts += [
        package.joinpath(f"algorithms/{algorithm.value}.lua").read_text() for algorithm in Algorithm
    ]
    parts.append(package.joinpath("lua/dispatch.lua").read_text())
    return "\n".join(parts)


SOURCE = _source()


def limit_args(limit: Limit) -> list[str]:
    """The nine per-hit fields after the cost, fixed for a limit."""
    return [
        limit.algorithm.value,
        str(limit.amount),
        repr(limit.period),
        str(limit.capacity),
        repr(limit.rate),
        repr(limit.interval),
        repr(limit.bucket),
        limit.unit,
        "1" if limit.partial else "0",
    ]


def arguments(
    hits: Sequence[tuple[Limit, int]], now: float | None, all_or_nothing: bool
) -> list[str]:
    """ARGV for a batch of ``(limit, cost)`` hits."""
    args = ["" if now is None else repr(float(now)), "1" if all_or_nothing else "0"]
    for limit, cost in hits:
        fields = limit_args(limit)
        args.append(fields[0])
        args.append(str(cost))
        args.extend(fields[1:])
    return args


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
