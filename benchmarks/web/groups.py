"""The web benchmarks' groups: one per framework, each one route built bare, once per limiter,
and for reference with what a limiter cannot avoid (the applications: ``asgi_apps`` and
``wsgi_apps``).

Every limiter holds the same single limit, keyed by the client's address, fixed window, in
memory; the peers send the same rate-limit headers as ratekeeper (``headers_enabled=True``)
except django-ratelimit, which has none.

"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The limit of every timed row: one that no run reaches, so every request is admitted.
LIMIT = "1000000/minute"
#: The limit of the sanity pass: the third request within a minute must be refused.
TINY = "2/minute"
#: ratekeeper's target: at least this many times less overhead than slowapi and Flask-Limiter.
TARGET = 3.0
#: The rate-limit headers every limiter but django-ratelimit sends on an admitted response.
HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")


@dataclass(frozen=True)
class Contender:
    """One application, bare or limited: ``build(limit)`` makes it (``limit`` is None for the
    bare one). ``refused`` is the status its limiter refuses with, ``admitted`` that of a
    request it admits in the sanity pass (a 401 where only failures are charged); ``note``
    how it is set up.
    ``settle(app)`` waits out background work the limiter started (a storage's timer). A
    ``reference`` limits nothing: it shows what the framework charges any limiter of its kind.
    ``headers`` says it sends the rate-limit headers (``HEADERS``) on an admitted response.
    """

    name: str
    build: Callable[[str | None], Any]
    note: str = ""
    refused: int = 429
    admitted: int = 200  # the status of an admitted request in the sanity pass
    peer: bool = False
    settle: Callable[[Any], None] | None = None
    reference: bool = False
    headers: bool = True


@dataclass(frozen=True)
class Comparison:
    """Ratios of the overhead of each of ``peers`` to that of the ratekeeper row ``ours``."""

    ours: str
    peers: tuple[str, ...]
    target: float | None = TARGET


@dataclass(frozen=True)
class Group:
    title: str
    kind: str  # "asgi" or "wsgi"
    bare: Contender
    limited: tuple[Contender, ...]
    comparisons: tuple[Comparison, ...]
    note: str = ""


def join_timer(storage: Any) -> None:
    """Join the expiry timer of a ``limits`` MemoryStorage, if it is running."""
    timer = getattr(storage, "timer", None)
    if timer is not None and timer.is_alive():
        timer.join()
