"""``SQLConfigStore``: the ``ConfigStore`` contract written once, over a backend's SQL.

Its verbs check what they are given, turn overrides into rows and rows back into overrides,
report this instance's changes to its subscribers and name the store in every error. A backend
(``sqlite``, ``postgres``) gives only what is its own: its connection, its dialect, and how it
hears of other instances' changes (``_watch``). It sets ``where`` (how its errors name it),
``_parse`` (how a stored ``config`` reads back), the statements ``_select`` (the config of one
domain and key) and ``_probe`` (``ping``'s read), and implements ``_fetch``, ``_put``,
``_put_many``, ``_drop`` and ``_listing``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

from ratekeeper.config.changes import (
    Callback,
    Invalid,
    PerProcess,
    check_key,
    check_override,
    checked,
    overrides,
    paged,
    where,
)
from ratekeeper.core.errors import ConfigStoreError
from ratekeeper.core.overrides import Override


class Connection(Protocol):
    """What the base needs of a backend's connection: that it closes."""

    def close(self) -> None: ...


D = TypeVar("D", bound=Connection)
#: A statement as the backend's driver takes it.
Q = TypeVar("Q")


class SQLConfigStore(PerProcess[D], Generic[D, Q]):
    """A ``ConfigStore`` over one table of ``(domain, key, config)`` rows; see the module."""

    #: How the store's errors name it, e.g. ``SQLite configuration store ratekeeper.db``.
    where: str
    #: A stored ``config`` read back as an ``Override``: ``(config, where) -> Override``.
    _parse: Callable[[Any, str], Override]
    #: ``config`` of the row of ``(domain, key)``.
    _select: Q
    #: Reads the table and nothing more: ``ping``'s question.
    _probe: Q

    def __init__(self, *, page_size: int, create: bool) -> None:
        super().__init__()
        self._page_size = page_size
        self._create = create

    # -- what a backend gives --------------------------------------------------------------

    def _fetch(self, doing: str, statement: Q, parameters: tuple[Any, ...]) -> list[Any]:
        """The rows of ``statement`` on this process's connection; a failure raises
        ``_error(doing, ...)``."""
        raise NotImplementedError

    def _put(self, domain: str, key: str, config: str) -> None:
        """Store one row, committed (and announced to other instances) when it returns."""
        raise NotImplementedError

    def _put_many(
        self, domain: str, rows: list[tuple[str, str]], progress: Callable[[int], None] | None
    ) -> None:
        """Store the ``(key, config)`` rows in one transaction, telling ``progress`` (if given)
        how many are written after each batch (``changes.batches``)."""
        raise NotImplementedError

    def _drop(self, domain: str, key: str) -> bool:
        """Delete one row, committed (and announced) when it returns; whether there was one."""
        raise NotImplementedError

    def _listing(self, domain: str | None, prefix: str) -> tuple[Q, list[Any]]:
        """One page of ``items``, and its filters: the statement takes the ``(domain, key)``
        to list after, then the filters, then the page size."""
        raise NotImplementedError

    # -- what the backends share -----------------------------------------------------------

    def _error(self, doing: str, error: Exception | str) -> ConfigStoreError:
        return ConfigStoreError(f"{self.where}: {doing}: {error}")

    def _close_connection(self, db: D) -> None:
        db.close()

    # -- the contract ----------------------------------------------------------------------

    def get(self, key: str, domain: str = "") -> Override | None:
        check_key(key, domain)
        rows = self._fetch("cannot read", self._select, (domain, key))
        return self._parse(rows[0][0], where(domain, key)) if rows else None

    def ping(self) -> None:
        self._fetch("cannot read", self._probe, ())

    def set(self, key: str, override: Override, domain: str = "") -> None:
        check_key(key, domain)
        check_override(override)
        self._put(domain, key, override.to_json())
        self._subscribers.notify(domain, key)

    def set_many(
        self,
        items: Mapping[str, Override] | Iterable[tuple[str, Override]],
        domain: str = "",
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        pairs = checked(items, domain)
        if not pairs:
            return 0
        self._put_many(domain, [(key, override.to_json()) for key, override in pairs], progress)
        self._subscribers.notify_many(domain, [key for key, _ in pairs])
        return len(pairs)

    def delete(self, key: str, domain: str = "") -> bool:
        check_key(key, domain)
        deleted = self._drop(domain, key)
        if deleted:
            self._subscribers.notify(domain, key)
        return deleted

    def items(
        self, domain: str | None = None, prefix: str = "", *, on_invalid: Invalid | None = None
    ) -> Iterator[tuple[str, str, Override]]:
        statement, filters = self._listing(domain, prefix)

        def fetch(after: tuple[str, str]) -> list[Any]:
            return self._fetch("cannot list", statement, (*after, *filters, self._page_size))

        rows = paged(fetch, (domain or "", ""), self._page_size)
        yield from overrides(rows, self._parse, on_invalid)

    def subscribe(self, callback: Callback) -> None:
        self._here()
        if self._subscribers.add(callback):
            self._watch()
