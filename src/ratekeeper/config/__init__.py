"""The configuration store: durable per-key limit overrides, shared by every instance.

An override (``Override``) says which limit applies to one key, such as ``user:241531 -> 5 per
1 s``, and wins over the limit a rule file gives. Overrides live in a durable store, namespaced
by domain, and every instance learns of every change through ``subscribe``. Stores are chosen
by URL through one registry, ``open_config_store``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol
from urllib.parse import urlsplit

from ratekeeper.overrides import Override

__all__ = ["ConfigStore", "open_config_store"]


class ConfigStore(Protocol):
    """Durable per-key overrides, namespaced by domain (``""`` is the default namespace).

    ``get(key, domain="")`` is the key's override, or None. ``set(key, override, domain="")``
    stores it, replacing any other; the change is committed (durable) when ``set`` returns.
    ``delete(key, domain="")`` removes it and says whether there was one. ``items(domain=None,
    prefix="")`` yields ``(domain, key, override)`` sorted by domain then key (by code point),
    from every domain or one, for the keys starting with ``prefix``; it reads in pages, so a
    listing of any length runs in bounded memory, and a change made while it runs may or may
    not be seen (each row is seen at most once).

    ``subscribe(callback)`` calls ``callback(domain, key)`` after every change any instance
    sharing the store commits: this instance's own changes synchronously inside ``set`` and
    ``delete`` (after the commit), other instances' within a second, from a daemon thread
    started by the first ``subscribe``. ``callback(None, None)`` means anything may have
    changed (the backend cannot say what, or it may have missed changes while reconnecting).
    A callback's exceptions are logged and otherwise ignored. ``close()`` stops and joins the
    thread and closes the connections.

    Keys are non-empty strings; domains are strings; neither may hold a NUL character
    (``ConfigError``). A store that cannot answer raises ``ConfigStoreError``. Example::

        store = open_config_store("sqlite:///ratekeeper.db")
        store.set("user:241531", Override.from_dict({"time_window_sec": 1, "capacity": 5}))
        store.get("user:241531").limit  # Limit(5, 1.0, 'bucketed_window')
    """

    def get(self, key: str, domain: str = "") -> Override | None: ...

    def set(self, key: str, override: Override, domain: str = "") -> None: ...

    def delete(self, key: str, domain: str = "") -> bool: ...

    def items(
        self, domain: str | None = None, prefix: str = ""
    ) -> Iterator[tuple[str, str, Override]]: ...

    def subscribe(self, callback: Callable[[str | None, str | None], None]) -> None: ...

    def close(self) -> None: ...


def _sqlite(url: str, options: dict[str, Any]) -> ConfigStore:
    from ratekeeper.config.sqlite import SQLiteConfigStore

    path = url[len("sqlite://") :]
    if path.startswith("/"):
        path = path[1:]  # sqlite:///relative.db, sqlite:////absolute.db, sqlite:///:memory:
    if not path or "?" in path:
        raise ValueError(
            f"expected sqlite:///relative.db, sqlite:////absolute.db or sqlite://:memory:,"
            f" not {url!r}"
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
    ``ratekeeper[postgres]``); options ``table`` (default ``ratekeeper_overrides``, also the
    notification channel) and ``timeout`` (seconds per connection attempt and per statement,
    default 5). Raises ``ValueError`` for an unknown scheme and ``ConfigStoreError`` when the
    store cannot be opened.
    """
    scheme = urlsplit(url).scheme
    if scheme not in _REGISTRY:
        known = ", ".join(f"{name}://" for name in sorted(_REGISTRY))
        raise ValueError(
            f"unknown configuration store URL scheme {scheme!r}; expected one of: {known}"
        )
    return _REGISTRY[scheme](url, dict(options))
