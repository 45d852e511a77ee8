"""What both configuration-store backends share: key checks, paging, change callbacks, and one
connection per process.

A callback is ``callback(domain, key)``; ``(None, None)`` means "anything may have changed".
``Subscribers`` calls every registered callback and logs (never raises) what a callback raises,
so that neither a writer nor a background thread is ever broken by a subscriber.

``PerProcess`` is the life cycle both backends follow: nothing is opened by the constructor;
the connection opens on first use, in the process that uses it. A store built before a
pre-fork server forks works in each worker: the worker leaves the parent's connection alone
(neither uses nor closes it, since both would disturb the parent) and opens its own, and the
change thread, if something subscribed, starts again in the worker on its first call.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from math import inf
from typing import Any, Generic, TypeVar

from ratekeeper.core.errors import ConfigError, ConfigStoreError
from ratekeeper.core.overrides import Override

logger = logging.getLogger("ratekeeper.config")

#: ``items()`` reads this many rows per query, so that a long listing never sits in memory.
PAGE_SIZE = 1000
#: ``set_many`` writes this many rows per batch and reports its progress after each batch.
BATCH_SIZE = 1000
#: A ``set_many`` of more keys than this is reported as ``(None, None)``, once.
NAMED_CHANGES = 1000

Callback = Callable[[str | None, str | None], None]
#: ``on_invalid`` of ``items()``: called with the error of a stored row that does not validate.
Invalid = Callable[[ConfigError], None]

C = TypeVar("C")
R = TypeVar("R")


def check_key(key: str, domain: str) -> None:
    """Raise ``ConfigError`` unless ``key`` is a non-empty string and ``domain`` a string,
    both encoding as UTF-8 and neither holding a NUL character (which PostgreSQL text cannot
    store)."""
    if not isinstance(key, str) or not key:
        raise ConfigError(f"override key must be a non-empty string, not {key!r}")
    if not isinstance(domain, str):
        raise ConfigError(f"override domain must be a string, not {domain!r}")
    if "\x00" in key or "\x00" in domain:
        raise ConfigError(f"override key {key!r} in domain {domain!r} holds a NUL character")
    if not (key.isascii() and domain.isascii()):
        try:
            key.encode("utf-8"), domain.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                f"override key {key!r} in domain {domain!r} must encode as UTF-8"
            ) from None


def check_override(override: Override) -> None:
    """Raise ``ConfigError`` unless ``override`` is an ``Override``."""
    if not isinstance(override, Override):
        raise ConfigError(f"an override is an Override, not {override!r}")


def check_timeout(timeout: float) -> float:
    """``timeout`` if it is positive (finite) seconds; else raise ``ConfigError``."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < inf:
        raise ConfigError(f"timeout must be positive seconds, not {timeout!r}")
    return float(timeout)


def checked(
    items: Mapping[str, Override] | Iterable[tuple[str, Override]], domain: str
) -> list[tuple[str, Override]]:
    """The pairs of a ``set_many``, every key and override checked before anything is
    written."""
    pairs = list(items.items() if isinstance(items, Mapping) else items)
    for key, override in pairs:
        check_key(key, domain)
        check_override(override)
    return pairs


def batches(rows: list[R], progress: Callable[[int], None] | None) -> Iterator[list[R]]:
    """The rows of a ``set_many`` in batches of ``BATCH_SIZE``; after each is written,
    ``progress`` (if given) is told how many rows are written so far."""
    for start in range(0, len(rows), BATCH_SIZE):
        yield rows[start : start + BATCH_SIZE]
        if progress is not None:
            progress(min(start + BATCH_SIZE, len(rows)))


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


def overrides(
    rows: Iterable[Sequence[Any]],
    parse: Callable[[Any, str], Override],
    on_invalid: Invalid | None,
) -> Iterator[tuple[str, str, Override]]:
    """``(domain, key, override)`` of each ``(domain, key, config)`` row; a row that does not
    validate raises its ``ConfigError``, or with ``on_invalid`` is passed to it and skipped."""
    for domain, key, config in rows:
        try:
            override = parse(config, where(domain, key))
        except ConfigError as error:
            if on_invalid is None:
                raise
            on_invalid(error)
            continue
        yield domain, key, override


def where(domain: str, key: str) -> str:
    """How an error names a stored override."""
    return f"override {key!r} in domain {domain!r}" if domain else f"override {key!r}"


class Subscribers:
    """The callbacks of one store, called in the order they subscribed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callback] = []

    def __bool__(self) -> bool:
        return bool(self._callbacks)

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

    def notify_many(self, domain: str, keys: Sequence[str]) -> None:
        """Report the keys of one ``set_many``: each by name, or ``(None, None)`` once for
        more than ``NAMED_CHANGES``."""
        if len(keys) > NAMED_CHANGES:
            self.notify(None, None)
            return
        for key in keys:
            self.notify(domain, key)

    def forked(self) -> None:
        """In a child process: a new lock, since the parent's may have been held at the fork."""
        self._lock = threading.Lock()


#: Taken while a store moves into a new process; replaced in every child, since a thread of
#: the parent may have held it at the fork.
_fork_lock = threading.Lock()


def _new_fork_lock() -> None:
    global _fork_lock  # noqa: PLW0603 - one lock per process
    _fork_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_fork_lock)


class PerProcess(Generic[C]):
    """One connection per process, opened on first use, and a change thread.

    A backend implements ``_open()`` (a new connection, ready for use; ``ConfigStoreError`` if
    it cannot be had), ``_close_connection(db)`` and ``_watch()`` (start the change thread).
    Every call runs ``_here()`` first, then takes ``_lock`` and uses ``_connection()``.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._db: C | None = None
        self._pid = os.getpid()
        #: Connections of a parent process: never used nor closed in this one.
        self._inherited: list[C] = []
        self._subscribers = Subscribers()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def _open(self) -> C:
        raise NotImplementedError

    def _close_connection(self, db: C) -> None:
        raise NotImplementedError

    def _watch(self) -> None:
        raise NotImplementedError

    def _here(self) -> None:
        """Move into this process if it is not the one that used the store last."""
        if self._pid == os.getpid():
            return
        with _fork_lock:
            if self._pid == os.getpid():
                return
            self._lock = threading.RLock()
            if self._db is not None:
                self._inherited.append(self._db)
                self._db = None
            self._subscribers.forked()
            self._stop = threading.Event()
            self._thread = None  # the parent's thread does not exist here
            self._pid = os.getpid()
        if self._subscribers:
            self._watch()

    def _connection(self) -> C:
        """This process's connection, opened on first use; call it holding ``_lock``.

        Raises ``ConfigStoreError`` once the store is closed."""
        if self._db is None:
            if self._closed:
                raise ConfigStoreError("the configuration store is closed")
            self._db = self._open()
        return self._db

    def close(self) -> None:
        """Stop and join the change thread and close the connection; closing twice is fine."""
        if self._pid != os.getpid():
            return  # never used in this process: the connection and the thread are the parent's
        self._closed = True
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        with self._lock:
            db, self._db = self._db, None
            if db is not None:
                self._close_connection(db)
