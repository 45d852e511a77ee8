"""What a decision takes from its caller: a key and a cost, checked where they enter.

Every public entry point (``Limiter``, ``AsyncLimiter``, ``Engine``, ``AsyncEngine`` and every
request store's ``apply``, ``apply_many`` and ``release``) checks its keys and costs once,
before anything is counted, and raises ``InvalidInputError`` naming the bad value. So no caller,
local or remote, can buy capacity with a strange value, and no bad value reaches a store.

- A **key** is a non-empty ``str`` that encodes as UTF-8 (so no lone surrogate). A ``str``
  subclass, such as a ``StrEnum`` member, counts as its plain string value.
- A **cost** is an ``int`` (not a ``bool``) from 0 to ``MAX_COST``; 0 only looks. A cost above
  a limit's capacity is valid and always denied, with an infinite ``retry_after``.
- A **time** a caller gives a store (``now``, which tests and replays pass instead of the
  store's clock) is a finite number of seconds since the epoch: a NaN or an infinite time
  would be written into a key's state and make its next hits start afresh.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import isfinite
from typing import TYPE_CHECKING, Any

from ratekeeper.core.errors import InvalidInputError

if TYPE_CHECKING:
    from ratekeeper.core.limits import Limit

#: The largest cost: 2**53 - 1, the largest integer every store (including Redis's Lua, which
#: counts in doubles) holds exactly.
MAX_COST = 2**53 - 1


def check_cost(cost: Any) -> int:
    """Return ``cost`` as an ``int`` if it is a valid cost; else raise ``InvalidInputError``."""
    if cost.__class__ is int and 0 <= cost <= MAX_COST:
        return int(cost)
    if isinstance(cost, int) and not isinstance(cost, bool) and 0 <= cost <= MAX_COST:
        return int(cost)
    raise InvalidInputError(
        f"cost must be an integer from 0 to {MAX_COST} (0 only looks), not {_show(cost)}"
    )


def decimal(text: str) -> bool:
    """Whether ``text`` is a whole number written in 0-9: ``str.isdigit`` alone also takes
    '²' (which ``int`` cannot read) and other scripts' digits."""
    return text.isascii() and text.isdigit()


def check_now(now: Any) -> float:
    """Return ``now`` as a ``float`` if it is a valid time; else raise ``InvalidInputError``."""
    if isinstance(now, int | float) and not isinstance(now, bool) and isfinite(now):
        return float(now)
    raise InvalidInputError(f"now must be finite seconds since the epoch, not {_show(now)}")


def check_key(key: Any, what: str = "key") -> str:
    """Return ``key`` as a ``str`` if it is a valid key; else raise ``InvalidInputError``.

    ``what`` names the value in the message (``"key"``, ``"domain"``, ``"descriptor value"``).
    """
    if key.__class__ is str and key and key.isascii():
        return str(key)
    if isinstance(key, str) and key:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError as error:
            raise InvalidInputError(
                f"{what} must encode as UTF-8, not {_show(key)} ({error.reason} at {error.start})"
            ) from None
        return str.__str__(key)
    if isinstance(key, str):
        raise InvalidInputError(f"{what} must be a non-empty string, not ''")
    raise InvalidInputError(f"{what} must be a non-empty string, not {_show(key)}")


def check_text(text: Any, what: str) -> str:
    """Like ``check_key``, but the empty string is valid (a domain, a descriptor's value)."""
    if text.__class__ is str and text.isascii():
        return str(text)
    if isinstance(text, str) and not text:
        return ""
    return check_key(text, what)


def check_hit(key: Any, cost: Any) -> tuple[str, int]:
    """``(check_key(key), check_cost(cost))``: a store's whole check of one hit."""
    return check_key(key), check_cost(cost)


def check_hits(hits: Iterable[tuple[Any, Limit, Any]]) -> list[tuple[str, Limit, int]]:
    """Every ``(key, limit, cost)`` of a batch, its key and cost checked: a store's whole
    check of a batch, done before anything in it is counted."""
    return [(check_key(key), limit, check_cost(cost)) for key, limit, cost in hits]


def _show(value: Any) -> str:
    """A value as a message shows it: its repr with its type, cut to 80 characters."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    kind = type(value).__name__
    return shown if kind in ("int", "str") else f"{shown} ({kind})"
