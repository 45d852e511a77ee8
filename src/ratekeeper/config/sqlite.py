"""The SQLite configuration store: per-key overrides in one local database file.

Guarantee: every ``set``, ``set_many`` and ``delete`` is one committed transaction before it
returns. The database runs in WAL mode with ``synchronous=FULL``, so a committed change
survives the process being killed and, as far as the disk honours fsync, the machine losing
power. Across processes, readers never wait for a writer; writers take turns, each waiting up
to ``timeout`` seconds for the file's write lock; within one instance, one connection behind a
lock serves every thread. Reads see every change committed before they started. Other
processes' (and other connections') changes are noticed by polling ``PRAGMA data_version``
every ``poll_interval`` seconds and reported as ``(None, None)``, because SQLite does not say
what changed; this instance's own changes are reported precisely. Keep the file on a local
disk: WAL needs shared memory, which network file systems do not provide.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ratekeeper.config.base import SQLConfigStore
from ratekeeper.config.changes import PAGE_SIZE, batches, check_timeout, logger
from ratekeeper.core.errors import ConfigStoreError
from ratekeeper.core.overrides import Override

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


class SQLiteConfigStore(SQLConfigStore[sqlite3.Connection, str]):
    """A ``ConfigStore`` in the SQLite database at ``path``.

    ``create`` (default True) creates the file and its table when missing; with False, a
    missing file or one without the table is refused with ``ConfigStoreError``, and nothing is
    created. ``timeout`` is how many seconds a write waits for another writer's lock before
    failing with ``ConfigStoreError``; ``poll_interval`` how often the change poll runs once a
    callback has subscribed. The file is opened on first use; one connection per process,
    guarded by a lock, serves every thread.
    """

    _parse = staticmethod(Override.from_json)
    _select = "SELECT config FROM overrides WHERE domain = ? AND key = ?"
    _probe = "SELECT 1 FROM overrides LIMIT 1"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 5.0,
        poll_interval: float = 0.2,
        page_size: int = PAGE_SIZE,
        create: bool = True,
    ) -> None:
        super().__init__(page_size=page_size, create=create)
        self.path = os.fspath(path)
        self.where = f"SQLite configuration store {self.path}"
        self._timeout = check_timeout(timeout)
        self._poll_interval = poll_interval

    # -- the connection --------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        target, uri = self.path, False
        if not self._create and self.path != ":memory:":
            if not os.path.exists(self.path):
                raise self._error("cannot open", "no such file")
            target, uri = f"{Path(self.path).absolute().as_uri()}?mode=rw", True  # never create
        try:
            db = sqlite3.connect(
                target,
                timeout=self._timeout,
                isolation_level=None,
                check_same_thread=False,
                uri=uri,
            )
        except sqlite3.Error as error:
            raise self._error("cannot open", error) from error
        try:
            self._setup(db)
        except sqlite3.Error as error:
            db.close()
            raise self._error("cannot set up", error) from error
        except BaseException:
            db.close()
            raise
        return db

    def _setup(self, db: sqlite3.Connection) -> None:
        """Check the schema, and create it (taking the write lock) only when it is missing."""
        db.execute("PRAGMA synchronous=FULL")
        version = self._version(db)
        if version == SCHEMA_VERSION:
            return
        if not self._create:
            raise self._error("cannot open", "not a ratekeeper configuration store")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            if self._version(db) < SCHEMA_VERSION:
                db.execute(_SCHEMA)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _version(self, db: sqlite3.Connection) -> int:
        version: int = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise ConfigStoreError(
                f"{self.where}: schema version {version} is newer than"
                f" this ratekeeper understands ({SCHEMA_VERSION}); upgrade ratekeeper"
            )
        return version

    def _fetch(self, doing: str, statement: str, parameters: tuple[Any, ...]) -> list[Any]:
        self._here()
        with self._lock:
            db = self._connection()
            try:
                return db.execute(statement, parameters).fetchall()
            except sqlite3.Error as error:
                raise self._error(doing, error) from error

    # -- the rows --------------------------------------------------------------------------

    def _put(self, domain: str, key: str, config: str) -> None:
        self._fetch("cannot write", _UPSERT, (domain, key, config, time.time()))

    def _put_many(
        self, domain: str, rows: list[tuple[str, str]], progress: Callable[[int], None] | None
    ) -> None:
        now = time.time()
        stamped = [(domain, key, config, now) for key, config in rows]
        self._here()
        with self._lock:
            db = self._connection()
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    for batch in batches(stamped, progress):
                        db.executemany(_UPSERT, batch)
                    db.execute("COMMIT")
                finally:
                    if db.in_transaction:  # not committed: nothing of it stays
                        db.execute("ROLLBACK")
            except sqlite3.Error as error:
                raise self._error("cannot write", error) from error

    def _drop(self, domain: str, key: str) -> bool:
        statement = "DELETE FROM overrides WHERE domain = ? AND key = ? RETURNING 1"
        return bool(self._fetch("cannot delete", statement, (domain, key)))

    def _listing(self, domain: str | None, prefix: str) -> tuple[str, list[Any]]:
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
        return statement, filters

    # -- changes from other connections ----------------------------------------------------

    def _watch(self) -> None:
        version = self._data_version()
        self._thread = threading.Thread(
            target=self._poll,
            args=(version, self._stop),
            name="ratekeeper-sqlite-config",
            daemon=True,
        )
        self._thread.start()

    def _data_version(self) -> int:
        version: int = self._fetch("cannot poll", "PRAGMA data_version", ())[0][0]
        return version

    def _poll(self, version: int, stop: threading.Event) -> None:
        while not stop.wait(self._poll_interval):
            try:
                current = self._data_version()
            except ConfigStoreError as error:
                logger.warning("%s", error)
                continue
            if current != version:
                version = current
                self._subscribers.notify(None, None)
