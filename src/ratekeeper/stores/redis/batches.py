"""The batches of a Redis store: one script run per cluster slot, and how an ``all_or_nothing``
batch over several slots is settled (no I/O: the store twins send what this builds).

A batch is split into parts, one per slot (``Batch``). Each part runs atomically on its
server. With ``all_or_nothing`` over several slots, each part's reply also carries the ``now``
its server used (``Ran``); when every part admitted everything the batch is done, else each part
that admitted is refunded (``Refund``, the refund script's keys and ARGV) and every decision
reports ``granted`` 0. Hits under a limit with debt count whatever the others do: they are
never refunded, and keep their ``granted``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ratekeeper.core.decisions import Decision
from ratekeeper.stores.contract import Admitted, Hit
from ratekeeper.stores.redis.scripts import arguments, decisions

log = logging.getLogger("ratekeeper.store")

#: One script run of a batch: the indexes of its hits in the batch, its keys and its ARGV.
Batch = tuple[Sequence[int], list[str], list[str]]
#: One slot's part of an all_or_nothing batch that ran: the part, its decisions, its ``now``.
Ran = tuple[Batch, list[Decision], float]
#: A refund script run: its keys and ARGV.
Refund = tuple[list[str], list[str]]


def gather(size: int, batches: list[Batch], replies: list[Any]) -> list[Decision]:
    if len(batches) == 1:  # its hits in order
        return decisions(replies[0])
    results: list[Any] = [None] * size
    for (indexes, _, _), reply in zip(batches, replies, strict=True):
        for index, one in zip(indexes, decisions(reply), strict=True):
            results[index] = one
    return results


def admitted(size: int, ran: list[Ran], results: list[Decision] | None = None) -> list[Admitted]:
    """Each hit of a batch whose parts all ran with their ``now``, as ``Admitted``: its
    decision (from ``results`` when given, else its part's) and the time of its part."""
    found: list[Any] = [None] * size
    for (indexes, _, _), decided, now in ran:
        for index, one in zip(indexes, decided, strict=True):
            found[index] = Admitted(one if results is None else results[index], now)
    return found


def refunds_of(hits: Sequence[Hit], ran: list[Ran]) -> list[Refund]:
    """What the parts that admitted all their hits consumed, as refund script runs (a part
    that refused a hit kept nothing), but for the hits under a limit with debt."""
    refunds = []
    for (indexes, keys, _), decided, now in ran:
        if not all(one.allowed for one in decided):
            continue
        owed = [
            (keys[j], hits[i][1], one.granted)
            for j, (i, one) in enumerate(zip(indexes, decided, strict=True))
            if one.granted > 0 and not hits[i][1].debt
        ]
        if owed:
            refunds.append(
                (
                    [key for key, _, _ in owed],
                    arguments([(limit, granted) for _, limit, granted in owed], now, False),
                )
            )
    return refunds


def settle(hits: Sequence[Hit], ran: list[Ran]) -> tuple[list[Decision], list[Refund]]:
    """The decisions of an all_or_nothing batch whose parts all ran, and the refunds it owes:
    none when every hit was allowed; else those of ``refunds_of``, and every decision with
    ``granted`` 0 but those under a limit with debt."""
    results: list[Any] = [None] * len(hits)
    for (indexes, _, _), decided, _ in ran:
        for index, one in zip(indexes, decided, strict=True):
            results[index] = one
    if all(one.allowed for one in results):
        return results, []
    refused = [
        one._replace(granted=0) if one.granted and not hit[1].debt else one
        for hit, one in zip(hits, results, strict=True)
    ]
    return refused, refunds_of(hits, ran)


def unrefunded(keys: list[str], error: BaseException) -> None:
    """Log a refund that failed: its keys stay counted (never an over-admission)."""
    log.error(
        "redis: could not refund the hits on %s of a refused all_or_nothing batch (%s); "
        "they stay counted until their state frees up",
        ", ".join(keys),
        error,
    )
