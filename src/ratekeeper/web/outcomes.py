"""Limits charged by outcome: what a request came to (``Result``), and which results a limit
charges (``charge_when``, ``charge_statuses``).

A limit charged by outcome counts each attempt before the handler runs, so that it can refuse
it, and gives the attempt back once the handler's result is known and not one the limit
charges (a login that succeeded). N attempts at once can therefore never pass the limit: each
holds its unit until its own result gives it back. Only an admitted request's units are given
back, through the store's ``refund`` at the time they were counted; a request the gate refused
never ran, and gives back what its other limits took.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

log = logging.getLogger("ratekeeper.web")


class Result(NamedTuple):
    """What an admitted request came to: ``status``, its response's status code (500 when
    the handler raised, unless the exception carries a status: ``status_code``, as Starlette's
    ``HTTPException``, or ``code``, as Werkzeug's); ``error``, the exception it raised, if
    any."""

    status: int
    error: BaseException | None = None


#: Whether a limit charges a request's ``Result``.
Judge = Callable[[Result], bool]


def check_charging(charge_when: Any, charge_statuses: Any) -> Judge | None:
    """The test of a limit's results from its options (None: every request is charged):
    ``charge_when``, a function of a ``Result``, or ``charge_statuses``, the status codes
    charged (``{401, 403}``). ``TypeError`` or ``ValueError`` for bad ones, or both given."""
    if charge_when is not None and charge_statuses is not None:
        raise ValueError("give charge_when or charge_statuses, not both")
    if charge_when is not None:
        if not callable(charge_when):
            raise TypeError(f"charge_when is a test of a Result, not {charge_when!r}")
        judge: Judge = charge_when
        return judge
    if charge_statuses is None:
        return None
    statuses = _statuses(charge_statuses)
    return lambda result: result.status in statuses


def _statuses(charge_statuses: Any) -> frozenset[int]:
    if isinstance(charge_statuses, str | bytes) or not isinstance(charge_statuses, Iterable):
        raise TypeError(f"charge_statuses is a set of status codes, not {charge_statuses!r}")
    statuses = tuple(charge_statuses)
    if not statuses:
        raise ValueError("charge_statuses names at least one status code")
    for status in statuses:
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise ValueError(f"a status code is an integer from 100 to 599, not {status!r}")
    return frozenset(statuses)


def status_of(error: BaseException) -> int:
    """The status a handler's exception answers: its ``status_code`` or ``code`` when it is
    an HTTP status, else 500."""
    for name in ("status_code", "code"):
        status = getattr(error, name, None)
        if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599:
            return status
    return 500


def charged(judge: Judge, result: Result) -> bool:
    """Whether ``judge`` charges ``result``; a judge that raises charges (logged): a unit is
    never given back on a doubt."""
    try:
        return bool(judge(result))
    except Exception:
        log.exception("charge_when raised on %s: the request stays charged", result)
        return True
