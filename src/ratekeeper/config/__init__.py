"""The configuration store: durable per-key limit overrides, shared by every instance.

An override (``Override``) says which limit applies to one key, such as ``user:241531 -> 5 per
1 s``, and wins over the limit a rule file gives. Overrides live in a durable store, namespaced
by domain, and every instance learns of every change through ``subscribe``. Stores are chosen
by URL through one registry, ``open_config_store``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from ratekeeper.core.errors import ConfigError
from ratekeeper.core.overrides import Override
from ratekeeper.core.redaction import redacted

__all__ = ["ConfigStore", "open_config_store", "redacted"]


class ConfigStore(Protocol):
    """Durable per-key overrides, namespaced by domain (``""`` is the default namespace).

    ``get(key, domain="")`` is the key's override, or None. ``set(key, override, domain="")``
    stores it, replacing any other; the change is committed (durable) when ``set`` returns.
    ``set_many(items, domain="", progress=None)`` stores many ``(key, override)`` pairs (or a
    mapping) in one transaction: all of them, or none when it raises; every key is checked
    before anything is written; ``progress(done)`` is called as the rows are written (before
    the commit); it returns how many it stored. ``delete(key, domain="")`` removes a key's
    override and says whether there was one. ``items(domain=None, prefix="",
    on_invalid=None)`` yields ``(domain, key, override)`` sorted by domain then key (by code
    point), from every domain or one, for the keys starting with ``prefix``; it reads in
    pages, so a listing of any length runs in bounded memory, and a change made while it runs
    may or may not be seen (each row is seen at most once). A stored row that is not a valid
    override (``get`` and ``items`` raise ``ConfigError`` naming its domain and key) is passed
    to ``on_invalid(error)`` and skipped, when ``on_invalid`` is given.

    ``subscribe(callback)`` calls ``callback(domain, key)`` after every change any instance
    sharing the store commits: this instance's own changes synchronously inside ``set``,
    ``set_many`` and ``delete`` (after the commit), other instances' within a second, from a
    daemon thread started by the first ``subscribe``. ``callback(None, None)`` means anything
    may have changed (the backend cannot say what, it may have missed changes while
    reconnecting, or one ``set_many`` changed more than 1,000 keys). A callback's exceptions
    are logged and otherwise ignored. ``ping()`` reads the store's table and returns nothing,
    or raises ``ConfigStoreError`` when the store cannot answer (a readiness probe's question).
    ``close()`` stops and joins the thread and closes the connections; closing twice is
    harmless.

    A store connects on first use, not when it is built, and only in the process that uses
    it: a store built before a server forks its workers works in each of them.

    Keys are non-empty strings; domains are strings; both encode as UTF-8 and neither may hold
    a NUL character; an override is an ``Override`` (else ``ConfigError``). A store that
    cannot answer raises ``ConfigStoreError``. Example::

        store = open_config_store("sqlite:///ratekeeper.db")
        store.set("user:241531", Override.from_dict({"time_window_sec": 1, "capacity": 5}))
        store.get("user:241531").limit  # Limit(5, 1.0, 'fixed_window')
    """

    def get(self, key: str, domain: str = "") -> Override | None: ...

    def set(self, key: str, override: Override, domain: str = "") -> None: ...

    def set_many(
        self,
        items: Mapping[str, Override] | Iterable[tuple[str, Override]],
        domain: str = "",
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int: ...

    def delete(self, key: str, domain: str = "") -> bool: ...

    def items(
        self,
        domain: str | None = None,
        prefix: str = "",
        *,
        on_invalid: Callable[[ConfigError], None] | None = None,
    ) -> Iterator[tuple[str, str, Override]]: ...

    def subscribe(self, callback: Callable[[str | None, str | None], None]) -> None: ...

    def ping(self) -> None: ...

    def close(self) -> None: ...


def _sqlite(url: str, options: dict[str, Any]) -> ConfigStore:
    from ratekeeper.config.sqlite import SQLiteConfigStore

    path = url[len("sqlite://") :]
    if path.startswith("/"):
        path = path[1:]  # sqlite:///relative.db, sqlite:////absolute.db, sqlite:///:memory:
    if not path or "?" in path:
        raise ConfigError(
            f"expected sqlite:///relative.db, sqlite:////absolute.db or sqlite://:memory:,"
            f" not {redacted(url)!r}"
        )
    return SQLiteConfigStore(path, **options)


def _postgres(url: str, options: dict[str, Any]) -> ConfigStore:
    from ratekeeper.config.postgres import PostgresConfigStore

    return PostgresConfigStore(url, **options)


_REGISTRY: dict[str, Callable[[str, dict[str, Any]], ConfigStore]] = {
    "postgres": _postgres,
    "postgresql": _postgres,
    "sqlite": _sqlite,
}


#: The configuration store used when none is named: a SQLite file in the working directory.
DEFAULT_URL = "sqlite:///ratekeeper.db"


def open_config_store(url: str = DEFAULT_URL, **options: Any) -> ConfigStore:
    """Open the configuration store named by ``url``.

    ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``sqlite://:memory:`` (one
    process only); options ``timeout`` (seconds a write waits for the file's lock, default 5)
    and ``poll_interval`` (seconds between checks for other processes' changes, default 0.2).
    ``postgresql://user:password@host:port/dbname`` (or ``postgres://``; needs
    ``ratekeeper[postgres]``, else ``MissingExtraError``); options ``table`` (default
    ``ratekeeper_overrides``, also the notification channel) and ``timeout`` (seconds per
    connection attempt and per statement, default 5). Both take ``create`` (default True):
    False opens only a store that exists (a SQLite file, a PostgreSQL table) and creates
    nothing. Nothing connects until the first call. Raises ``ConfigError`` (a ``ValueError``)
    for a URL of an unknown scheme or a malformed one, or a bad option; the store's calls raise
    ``ConfigStoreError`` when it cannot be opened or fails. No message repeats a password.
    """
    scheme, separator, _ = url.partition("://")
    scheme = scheme.lower() if separator else ""
    if scheme not in _REGISTRY:
        known = ", ".join(f"{name}://" for name in sorted(_REGISTRY))
        raise ConfigError(
            f"unknown configuration store URL scheme {scheme!r}; expected one of: {known}"
        )
    try:
        return _REGISTRY[scheme](url, dict(options))
    except TypeError as error:  # an option the store does not take
        raise ConfigError(f"bad option for {redacted(url)}: {error}") from None
