"""The algorithms: one module each, holding its state and a pure ``step``, with its Lua twin.

Every module exposes::

    step(state, now, cost, limit) -> (new_state, Decision)

``state`` is ``None`` for a key never seen (or expired); ``now`` is the time in seconds since
the epoch, passed in (``step`` never reads a clock); ``cost`` is the weight of the hit, 0 to look
without consuming. ``step`` does no I/O. A denied hit returns the state unchanged, unless the
limit has ``debt`` and the hit a cost: then it is counted all the same (``Decision.granted`` is
its cost) and the state carries the debt, each module saying how. A hit whose cost exceeds the
limit's capacity can never be allowed: it is denied with an infinite ``retry_after``. ``step``
never mutates the state it is given, so a store can drop the new state to roll back, with one
exception: the sliding log updates its log in place (copying it would cost O(amount) per hit),
so its module also has ``copy_state(state)``, which a store that must roll back steps on
(``Limit.copy_state``; ``None`` for every other algorithm).

Every module also exposes the compensation of an admitted hit::

    refund(state, now, cost, limit) -> new_state

which takes back ``cost`` units (what the hit was granted) that ``step`` admitted at ``now``
(the same ``now``), from the state as it is by then. Right after the step it is the step's
exact inverse: every later decision is the one the state without the hit would give. With
other hits in between, the windows, the log, the buckets and the slots still take back
exactly what the hit added, where the hit's window or bucket still holds it (one that has
moved on has forgotten it already); the token bucket, GCRA and the leaky buckets cannot tell
how much refill a full bucket lost meanwhile, so they may leave up to that interval's refill
more room than the hit's absence would have, never more than the hit took. A store that
applies one batch in several atomic parts (a Redis Cluster, one script run per slot) refunds
the parts it applied when another part refused, within the same call. ``refund`` follows
``step`` in place or not (the sliding log's updates its log in place), and returns ``None``
where the state is left holding nothing and that means the same as no state.

A module whose limits can lease (``Limit(sync="leased")``, ``ratekeeper.algorithms.leases``)
defines ``hold(state, now, held, limit)`` if it refills over time (the state with ``held``
units kept out of what refills) or ``edge(now, limit)`` if it counts per window (when a slice
taken at ``now`` must end), with ``FROZEN = True`` if nothing of its budget comes back
before that edge; one whose limits cannot declares ``NO_LEASE``, the reason.

Every module declares ``LETTER``, the letter naming its limits in store keys, and
``TAKES_BURST``. Importing this package binds each module into the registry of algorithms
(``ratekeeper.core.registry``), where limits, keys and the Lua scripts find them.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

from ratekeeper.core.registry import Algorithm, Spec, bind, spec

__all__ = ["Algorithm", "refund_function"]


def _bind(algorithm: Algorithm) -> None:
    """Bind ``algorithm``'s module, ``ratekeeper.algorithms.NAME``, into the registry."""
    module = import_module(f"{__name__}.{algorithm.value}")
    bind(
        algorithm,
        Spec(
            module.step,
            module.refund,
            getattr(module, "copy_state", None),
            module.LETTER,
            module.TAKES_BURST,
            getattr(module, "hold", None),
            getattr(module, "edge", None),
            getattr(module, "FROZEN", False),
            getattr(module, "NO_LEASE", ""),
        ),
    )


for _algorithm in Algorithm:
    _bind(_algorithm)


def refund_function(algorithm: Algorithm) -> Callable[..., Any]:
    """Return the ``refund`` of ``algorithm``'s module."""
    return spec(algorithm).refund
