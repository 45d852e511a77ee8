"""The Lua scripts the Redis stores run, and their arguments and replies.

Two kinds of script are assembled from ``lua/prelude.lua`` and the ``.lua`` twin beside each
algorithm's Python module:

- ``SOURCE``, the batch script (``apply_many``): the prelude, every twin and
  ``lua/dispatch.lua``; it applies a batch of hits in one round trip, its layout documented in
  ``dispatch.lua``;
- ``SINGLE[algorithm]``, one single-hit script per algorithm (``apply``): the prelude, that
  algorithm's twin and ``lua/single.lua``; eleven arguments, no dispatch.

Both run the same twin, so one parity suite binds both to the Python ``step``. Each reply is a
flat array of seven fields per decision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from importlib.resources import files
from typing import Any

from ratekeeper.algorithms import Algorithm
from ratekeeper.decision import Decision
from ratekeeper.limit import Limit

#: The batch script's header: NEEDS from the algorithms of ARGV's limit blocks (9 fields each).
BATCH_HEADER = (
    "local NEEDS = {}\nfor j = 1, tonumber(ARGV[3]) do NEEDS[ARGV[3 + (j - 1) * 9 + 1]] = true end"
)
FIELDS = 7  # per decision in a reply

_new = tuple.__new__


def _read(name: str) -> str:
    return files("ratekeeper").joinpath(name).read_text()


def batch_source(read: Callable[[str], str] = _read) -> str:
    """The batch script, its parts read by ``read(path inside the package)``."""
    parts = [BATCH_HEADER, read("lua/prelude.lua")]
    parts += [read(f"algorithms/{algorithm.value}.lua") for algorithm in Algorithm]
    parts.append(read("lua/dispatch.lua"))
    return "\n".join(parts)


def _single_source(algorithm: Algorithm) -> str:
    name = algorithm.value
    return "\n".join(
        [
            f"local NEEDS = {{{name} = true}}",
            _read("lua/prelude.lua"),
            _read(f"algorithms/{name}.lua"),
            f"local STEP = {name}",
            _read("lua/single.lua"),
        ]
    )


SOURCE = batch_source()
SINGLE = {algorithm: _single_source(algorithm) for algorithm in Algorithm}


@lru_cache(maxsize=4096)
def limit_args(limit: Limit) -> tuple[str, ...]:
    """A limit's nine fields, as the scripts read them; built once per limit."""
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


def now_arg(now: float | None) -> str:
    """ARGV[1] of either script: ``now`` exactly, or '' for the server's ``TIME``."""
    return "" if now is None else repr(float(now))


def arguments(
    hits: Sequence[tuple[Limit, int]], now: float | None, all_or_nothing: bool
) -> list[str]:
    """The batch script's ARGV for ``(limit, cost)`` hits: each distinct limit's fields once,
    then a limit index and a cost per hit (layout in ``dispatch.lua``)."""
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
    return [now_arg(now), "1" if all_or_nothing else "0", str(len(index)), *blocks, *tail]


def decision(reply: Sequence[Any]) -> Decision:
    """Decode a single-hit script's reply: ``allowed, limit, remaining, reset_after,
    retry_after, delay, granted`` (integers come back as ``int``; the floats as ``int`` or as
    ``%.17g`` bytes)."""
    allowed, limit, remaining, reset_after, retry_after, delay, granted = reply
    return _new(
        Decision,
        (
            allowed == 1,
            limit,
            remaining,
            float(reset_after),
            float(retry_after),
            float(delay),
            granted,
            False,
        ),
    )


def decisions(reply: Sequence[Any]) -> list[Decision]:
    """Decode a batch script's reply, seven fields per hit, into one decision per hit."""
    fields = iter(reply)
    return [
        _new(Decision, (a == 1, n, r, float(ra), float(rt), float(d), g, False))
        for a, n, r, ra, rt, d, g in zip(*(fields,) * FIELDS, strict=True)
    ]
