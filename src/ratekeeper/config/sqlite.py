"""The SQLite configuration store: per-key overrides in one local database file.

Guarantee: every ``set`` and ``delete`` is one committed transaction before it returns. The
database runs in WAL mode with ``synchronous=FULL``, so a committed change survives the process
being killed and, as far as the disk honours fsync, the machine losing power. Across processes,
readers never wait for a writer; writers take turns, each waiting up to ``timeout`` seconds for
the file's write lock; within one instance, one connection behind a lock serves every thread.
Reads see every change committed before they started. Other processes' (and other
connections') changes are noticed by polling ``PRAGMA data_version`` every ``poll_interval``
seconds and reported as ``(None, None)``, because SQLite does not say what changed; this
instance's own changes are reported precisely. Keep the file on a local disk: WAL needs shared
memory, which network file systems do not provide.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

from ratekeeper.config.changes import (
    PAGE_SIZE,
    Callback,
    Subscribers,
    check_key,
    logger,
    paged,
    where,
)
from ratekeeper.errors import ConfigStoreError
from ratekeeper.overrides import Override

#: The schema this module writes, kept in ``PRAGMA user_version``.
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS overrides (
    domain TEXT NOT NULL,
    key TEXT NOT NULL,
    config TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (domain, key)
) WITHOUT ROWID
"""

_UPSERT = """
INSERT INTO overrides (domain, key, config, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (domain, key) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at
"""


class SQLiteConfigStore:
    """A ``ConfigStore`` in the SQLite database at ``path`` (created if missing).

    ``timeout`` is how many seconds a write waits for another writer's lock before failing with
    ``ConfigStoreError``; ``poll_interval`` how often the change poll runs once a callback has
    subscribed. One connection, guarded by a lock, serves every thread.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 5.0,
        poll_interval: float = 0.2,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.path = os.fspath(path)
        self._poll_interval = poll_interval
        self._page_size = page_size
        self._lock = threading.RLock()
        self._subscribers = Subscribers()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise self._error("cannot open", error) from error
        try:
            self._setup()
        except sqlite3.Error as error:
            self._db.close()
            raise self._error("cannot set up", error) from error

    def _error(self, doing: str, error: Exception) -> ConfigStoreError:
        return ConfigStoreError(f"SQLite configuration store {self.path}: {doing}: {error}")

    def _setup(self) -> None:
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ConfigStoreError(
                    f"SQLite configuration store {self.path}: schema version {version} is newer"
                    f" than this ratekeeper understands ({SCHEMA_VERSION}); upgrade ratekeeper"
                )
            db.execute(_SCHEMA)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _run(self, doing: str, statement: str, parameters: tuple[Any, ...]) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(statement, parameters).fetchall()
            except sqlite3.Error as error:
                raise self._error(doing, error) from error

    def get(self, key: str, domain: str = "") -> Override | None:
        check_key(key, domain)
        rows = self._run(
            "cannot read",
            "SELECT config FROM overrides WHERE domain = ? AND key = ?",
            (domain, key),
        )
        return Override.from_json(rows[0][0], where(domain, key)) if rows else None

    def set(self, key: str, override: Override, domain: str = "") -> None:
        check_key(key, domain)
        config = override.to_json()
        self._run("cannot write", _UPSERT, (domain, key, config, time.time()))
        self._subscribers.notify(domain, key)

    def delete(self, key: str, domain: str = "") -> bool:
        check_key(key, domain)
        rows = self._run(
            "cannot delete",
            "DELETE FROM overrides WHERE domain = ? AND key = ? RETURNING 1",
            (domain, key),
        )
        if rows:
            self._subscribers.notify(domain, key)
        return bool(rows)

    def items(
        self, domain: str | None = None, prefix: str = ""
    ) -> Iterator[tuple[str, str, Override]]:
        conditions = ["(domain, key) > (?, ?)"]
        filters: list[Any] = []
        if domain is not None:
            conditions.append("domain = ?")
            filters.append(domain)
        if prefix:
            conditions.append("key >= ? AND substr(key, 1, length(?)) = ?")
            filters += [prefix, prefix, prefix]
        statement = (
            "SELECT domain, key, config FROM overrides WHERE "
            + " AND ".join(conditions)
            + " ORDER BY domain, key LIMIT ?"
        )

        def fetch(after: tuple[str, str]) -> list[Any]:
            return self._run("cannot list", statement, (*after, *filters, self._page_size))

        for row_domain, key, config in paged(fetch, (domain or "", ""), self._page_size):
            yield row_domain, key, Override.from_json(config, where(row_domain, key))

    def subscribe(self, callback: Callback) -> None:
        if not self._subscribers.add(callback):
            return
        version = self._data_version()
        self._thread = threading.Thread(
            target=self._poll, args=(version,), name="ratekeeper-sqlite-config", daemon=True
        )
        self._thread.start()

    def _data_version(self) -> int:
        version: int = self._run("cannot poll", "PRAGMA data_version", ())[0][0]
        return version

    def _poll(self, version: int) -> None:
        while not self._stop.wait(self._poll_interval):
            try:
                current = self._data_version()
            except ConfigStoreError as error:
                logger.warning("%s", error)
                continue
            if current != version:
                version = current
                self._subscribers.notify(None, None)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            self._db.close()
