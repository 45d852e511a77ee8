"""The PostgreSQL configuration store: per-key overrides shared by every ratekeeper instance.

Guarantee: every ``set``, ``set_many`` and ``delete`` is one committed transaction before it
returns, with ``synchronous_commit=on`` (so it is in the server's WAL on disk, and on any
synchronous standby the server is configured to wait for). The change and its notification are
one transaction: ``pg_notify`` on the channel named like the table is delivered if and only if
the change commits. Every instance LISTENs on its own connection from a background thread and
reports other instances' changes as ``(domain, key)`` as soon as they arrive (milliseconds on a
LAN). When that connection breaks, the thread reconnects with backoff and then reports
``(None, None)``, since notifications sent meanwhile are lost. Reads see every change committed
before they started. Every call is bounded: ``timeout`` seconds to connect (libpq rounds it up
to whole seconds, at least 2) and per statement; a failure raises ``ConfigStoreError``, and the
next call reconnects (a call that finds its idle connection dead reconnects and retries once).
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ratekeeper.config.base import SQLConfigStore
from ratekeeper.config.changes import NAMED_CHANGES, PAGE_SIZE, batches, check_timeout, logger
from ratekeeper.core.errors import ConfigError, ConfigStoreError, MissingExtraError
from ratekeeper.core.overrides import Override
from ratekeeper.core.redaction import redacted

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
except ImportError as error:  # pragma: no cover - the dev extra installs psycopg
    raise MissingExtraError("psycopg", "postgres") from error

T = TypeVar("T")

#: PostgreSQL refuses a notification payload of 8000 bytes or more; a longer key is announced
#: as "anything may have changed".
MAX_PAYLOAD = 7999
#: Seconds between reconnection attempts of the listener: doubling from the first to the last,
#: which is short so that changes are reported again about a second after the server returns.
BACKOFF = (0.1, 1.0)
_TABLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresConfigStore(SQLConfigStore[psycopg.Connection[Any], sql.Composed]):
    """A ``ConfigStore`` in the table ``table`` of the PostgreSQL database at ``url``.

    ``create`` (default True) creates the table (and so the notification channel, named like
    it) when missing; with False, a missing table is refused with ``ConfigStoreError`` and
    nothing is created. ``timeout`` bounds each connection attempt and each statement, in
    seconds. Nothing connects before the first call; then one connection per process, guarded
    by a lock, serves every thread; the listener has its own.
    """

    _parse = staticmethod(Override.from_dict)

    def __init__(
        self,
        url: str,
        *,
        table: str = "ratekeeper_overrides",
        timeout: float = 5.0,
        page_size: int = PAGE_SIZE,
        create: bool = True,
    ) -> None:
        if not _TABLE.fullmatch(table):
            raise ConfigError(f"table must be a lower-case SQL identifier, not {table!r}")
        super().__init__(page_size=page_size, create=create)
        self.table = table
        self._table = sql.Identifier(table)
        self._ready = False  # the table is known to exist
        millis = max(1, int(check_timeout(timeout) * 1000))
        try:
            given = conninfo_to_dict(url).get("options") or ""
            self._conninfo = make_conninfo(
                url,
                connect_timeout=max(2, math.ceil(timeout)),
                options=(
                    f"{given} -c statement_timeout={millis} -c lock_timeout={millis}"
                    " -c synchronous_commit=on"
                ).strip(),
                keepalives=1,
                keepalives_idle=5,
                keepalives_interval=2,
                keepalives_count=3,
                tcp_user_timeout=millis,
            )
            params = conninfo_to_dict(self._conninfo)
        except psycopg.Error as error:
            message = redacted(str(error).replace(url, redacted(url)))
            raise ConfigError(f"bad PostgreSQL URL: {message}") from None
        self.where = (
            f"PostgreSQL configuration store {params.get('host', 'localhost')}:"
            f"{params.get('port', 5432)}/{params.get('dbname', '')}"
        )
        # Composed once: the table never changes, and get runs on every plan-cache miss.
        self._select = sql.SQL("SELECT config FROM {} WHERE domain = %s AND key = %s").format(
            self._table
        )
        self._write = sql.SQL(
            "INSERT INTO {} (domain, key, config) VALUES (%s, %s, %s::jsonb)"
            " ON CONFLICT (domain, key) DO UPDATE SET config = EXCLUDED.config, updated_at = now()"
        ).format(self._table)
        self._upsert = sql.SQL(
            "WITH changed AS (INSERT INTO {} (domain, key, config) VALUES (%s, %s, %s::jsonb)"
            " ON CONFLICT (domain, key) DO UPDATE"
            " SET config = EXCLUDED.config, updated_at = now() RETURNING 1)"
            " SELECT pg_notify(%s, %s) FROM changed"
        ).format(self._table)
        self._delete = sql.SQL(
            "WITH changed AS (DELETE FROM {} WHERE domain = %s AND key = %s RETURNING 1)"
            " SELECT pg_notify(%s, %s) FROM changed"
        ).format(self._table)
        self._probe = sql.SQL("SELECT 1 FROM {} LIMIT 1").format(self._table)
        self._own_pid = 0

    # -- the connection --------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self._conninfo, autocommit=True)

    def _open(self) -> psycopg.Connection[Any]:
        try:
            db = self._connect()
        except psycopg.Error as error:
            raise self._error("cannot connect", error) from error
        try:
            if not self._ready:
                self._prepare(db)
                self._ready = True
        except psycopg.Error as error:
            db.close()
            doing = "cannot create the table" if self._create else "cannot find the table"
            raise self._error(doing, error) from error
        except BaseException:
            db.close()
            raise
        self._own_pid = db.info.backend_pid
        return db

    def _prepare(self, db: psycopg.Connection[Any]) -> None:
        if not self._create:
            found = db.execute("SELECT to_regclass(%s)", (self.table,)).fetchone()
            if found is None or found[0] is None:
                raise ConfigStoreError(f"{self.where}: no table {self.table}")
            return
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))
            db.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} ("
                    ' domain text COLLATE "C" NOT NULL,'
                    ' key text COLLATE "C" NOT NULL,'
                    " config jsonb NOT NULL,"
                    " updated_at timestamptz NOT NULL DEFAULT now(),"
                    " PRIMARY KEY (domain, key))"
                ).format(self._table)
            )

    def _run(self, doing: str, operation: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``operation`` on this process's connection; errors become ``ConfigStoreError``."""
        self._here()
        with self._lock:
            for attempt in range(2):
                fresh = self._db is None or self._db.closed
                if fresh:
                    self._db = None
                db = self._connection()
                try:
                    return operation(db)
                except psycopg.Error as error:
                    broken = db.broken or db.closed
                    if broken:
                        db.close()
                        self._db = None
                    if broken and not fresh and attempt == 0:
                        continue  # an idle connection found dead: reconnect and retry once
                    raise self._error(doing, error) from error
        raise AssertionError("unreachable")

    def _fetch(self, doing: str, query: sql.Composed, parameters: tuple[Any, ...]) -> list[Any]:
        return self._run(doing, lambda db: db.execute(query, parameters).fetchall())

    # -- the rows --------------------------------------------------------------------------

    def _put(self, domain: str, key: str, config: str) -> None:
        parameters = (domain, key, config, self.table, _payload(domain, key))
        self._fetch("cannot write", self._upsert, parameters)

    def _put_many(
        self, domain: str, rows: list[tuple[str, str]], progress: Callable[[int], None] | None
    ) -> None:
        written = [(domain, key, config) for key, config in rows]
        keys = [key for key, _ in rows]
        announce = (
            (self.table, [_payload(domain, key) for key in keys])
            if len(keys) <= NAMED_CHANGES
            else (self.table, [""])  # "anything may have changed", once
        )

        def write(db: psycopg.Connection[Any]) -> None:
            with db.transaction(), db.cursor() as cursor:
                for batch in batches(written, progress):
                    cursor.executemany(self._write, batch)
                cursor.execute("SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", announce)

        self._run("cannot write", write)

    def _drop(self, domain: str, key: str) -> bool:
        parameters = (domain, key, self.table, _payload(domain, key))
        return bool(self._fetch("cannot delete", self._delete, parameters))

    def _listing(self, domain: str | None, prefix: str) -> tuple[sql.Composed, list[Any]]:
        conditions = [sql.SQL("(domain, key) > (%s, %s)")]
        filters: list[Any] = []
        if domain is not None:
            conditions.append(sql.SQL("domain = %s"))
            filters.append(domain)
        if prefix:
            conditions.append(sql.SQL("key >= %s AND starts_with(key, %s)"))
            filters += [prefix, prefix]
        query = sql.SQL(
            "SELECT domain, key, config FROM {} WHERE {} ORDER BY domain, key LIMIT %s"
        ).format(self._table, sql.SQL(" AND ").join(conditions))
        return query, filters

    # -- changes from other instances ------------------------------------------------------

    def _watch(self) -> None:
        try:
            listener: psycopg.Connection[Any] | None = self._listen()
        except psycopg.Error as error:
            logger.warning("%s: cannot listen yet, retrying: %s", self.where, error)
            listener = None
        self._thread = threading.Thread(
            target=self._listen_loop,
            args=(listener, self._stop),
            name="ratekeeper-postgres-config",
            daemon=True,
        )
        self._thread.start()

    def _listen(self) -> psycopg.Connection[Any]:
        listener = self._connect()
        try:
            listener.execute(sql.SQL("LISTEN {}").format(self._table))
        except BaseException:
            listener.close()
            raise
        return listener

    def _listen_loop(self, listener: psycopg.Connection[Any] | None, stop: threading.Event) -> None:
        delay = BACKOFF[0]
        while not stop.is_set():
            if listener is None:
                try:
                    listener = self._listen()
                except psycopg.Error as error:
                    logger.warning("%s: cannot listen, retrying: %s", self.where, error)
                    stop.wait(delay)
                    delay = min(delay * 2, BACKOFF[1])
                    continue
                delay = BACKOFF[0]
                self._subscribers.notify(None, None)  # what was sent meanwhile is lost
            try:
                for notify in listener.notifies(timeout=0.25):
                    if notify.pid != self._own_pid:  # this instance reported its own already
                        self._subscribers.notify(*_parse(notify.payload))
                    if stop.is_set():
                        break
            except psycopg.Error as error:
                logger.warning("%s: lost the listener, reconnecting: %s", self.where, error)
                listener.close()
                listener = None
        if listener is not None:
            listener.close()


def _payload(domain: str, key: str) -> str:
    payload = json.dumps({"domain": domain, "key": key}, ensure_ascii=False)
    return payload if len(payload.encode()) <= MAX_PAYLOAD else ""


def _parse(payload: str) -> tuple[str | None, str | None]:
    try:
        data = json.loads(payload)
        return str(data["domain"]), str(data["key"])
    except (ValueError, TypeError, KeyError):
        return None, None
