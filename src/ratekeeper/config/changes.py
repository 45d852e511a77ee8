"""What both configuration-store backends share: key checks, paging and change callbacks.

A callback is ``callback(domain, key)``; ``(None, None)`` means "anything may have changed".
``Subscribers`` calls every registered callback and logs (never raises) what a callback raises,
so that neither a writer nor a background thread is ever broken by a subscriber.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ratekeeper.errors import ConfigError

logger = logging.getLogger("ratekeeper.config")

#: ``items()`` reads this many rows per query, so that a long listing never sits in memory.
PAGE_SIZE = 1000

Callback = Callable[[str | None, str | None], None]


def check_key(key: str, domain: str) -> None:
    """Raise ``ConfigError`` unless ``key`` is a non-empty string and ``domain`` a string,
    neither holding a NUL character (which PostgreSQL text cannot store)."""
    if not isinstance(key, str) or not key:
        raise ConfigError(f"override key must be a non-empty string, not {key!r}")
    if not isinstance(domain, str):
        raise ConfigError(f"override domain must be a string, not {domain!r}")
    if "\x00" in key or "\x00" in domain:
        raise ConfigError(f"override key {key!r} in domain {domain!r} holds a NUL character")


def paged(
    fetch: Callable[[tuple[str, str]], Sequence[Sequence[Any]]], after: tuple[str, str], size: int
) -> Iterator[Sequence[Any]]:
    """Every row of a keyset-paged listing ordered by ``(domain, key)``.

    ``fetch(after)`` returns the next ``size`` rows (domain and key first) past ``after``; the
    listing ends with a short page. No transaction or lock is held between pages.
    """
    while True:
        rows = fetch(after)
        yield from rows
        if len(rows) < size:
            return
        after = (rows[-1][0], rows[-1][1])


def where(domain: str, key: str) -> str:
    """How an error names a stored override."""
    return f"override {key!r} in domain {domain!r}" if domain else f"override {key!r}"


class Subscribers:
    """The callbacks of one store, called in the order they subscribed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callback] = []

    def add(self, callback: Callback) -> bool:
        """Register ``callback``; True if it is the first one."""
        with self._lock:
            self._callbacks.append(callback)
            return len(self._callbacks) == 1

    def notify(self, domain: str | None, key: str | None) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(domain, key)
            except Exception:
                logger.exception(
                    "configuration change callback %r failed for (%r, %r)", callback, domain, key
                )
