"""The one registry of algorithms.

``Algorithm`` names every algorithm ratekeeper implements; a member's value is its name in
configuration, in a limit's id and in the Lua scripts. Everything else about an algorithm is
its own module's, ``ratekeeper/algorithms/NAME.py``, with its Lua twin ``NAME.lua`` beside it:
its pure ``step`` and ``refund``, ``copy_state`` if its step updates a state in place, the
letter of its keys (``LETTER``), whether ``burst`` applies to it (``TAKES_BURST``), and how
its limits lease (``hold`` and ``edge``, or ``NO_LEASE`` saying why they cannot).
``ratekeeper.algorithms`` binds each module here (``bind``) when it is imported, which
importing ``ratekeeper`` does first; so this value layer imports nothing above it, and what
the rest derives from the registry (a limit's ``step``, the letter in its keys, which
parameters it takes, the Lua scripts' tables of steps and refunds) is read from ``spec``.

Adding an algorithm is a member here, its module and its twin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Algorithm(StrEnum):
    """The algorithms ratekeeper implements; the value is the name used in configuration."""

    FIXED_WINDOW = "fixed_window"
    SLIDING_LOG = "sliding_log"
    SLIDING_COUNTER = "sliding_counter"
    BUCKETED_WINDOW = "bucketed_window"
    TOKEN_BUCKET = "token_bucket"
    LEAKY_BUCKET = "leaky_bucket"
    LEAKY_SHAPER = "leaky_shaper"
    GCRA = "gcra"
    CONCURRENCY = "concurrency"


@dataclass(frozen=True, slots=True)
class Spec:
    """What an algorithm's module provides: ``step(state, now, cost, limit)``,
    ``refund(state, now, cost, limit)``, ``copy_state(state)`` (None unless its step updates
    a state in place), the one letter naming it in keys, and whether ``burst`` applies.

    And for leased limits (``ratekeeper.algorithms.leases``): ``hold(state, now, held,
    limit)``, the state with ``held`` units kept out of what refills (None for an algorithm
    that counts per window, where a slice simply ends with its window); ``edge(now, limit)``,
    the time a slice taken at ``now`` must end by (None when only its lifetime bounds it);
    ``frozen``, whether nothing of its budget comes back before that edge (so a process that
    got less than it asked for has no reason to wait before it asks again); and ``no_lease``,
    why its limits cannot lease ("" when they can)."""

    step: Callable[..., Any]
    refund: Callable[..., Any]
    copy_state: Callable[[Any], Any] | None
    letter: str
    takes_burst: bool
    hold: Callable[..., Any] | None = None
    edge: Callable[..., float] | None = None
    frozen: bool = False
    no_lease: str = ""


_SPECS: dict[Algorithm, Spec] = {}


def bind(algorithm: Algorithm, spec: Spec) -> None:
    """Register ``spec`` as ``algorithm``'s; a letter already taken is a ``ValueError``."""
    for other, bound in _SPECS.items():
        if other is not algorithm and bound.letter == spec.letter:
            raise ValueError(f"{algorithm.value} and {other.value} both use letter {spec.letter!r}")
    _SPECS[algorithm] = spec


def spec(algorithm: Algorithm) -> Spec:
    """``algorithm``'s ``Spec``, as its module bound it."""
    return _SPECS[algorithm]
