"""The PostgreSQL configuration store: per-key overrides shared by every ratekeeper instance.

Guarantee: every ``set`` and ``delete`` is one committed transaction before it returns, with
``synchronous_commit=on`` (so it is in the server's WAL on disk, and on any synchronous standby
the server is configured to wait for). The change and its notification are one transaction:
``pg_notify`` on the channel named like the table is delivered if and only if the change
commits. Every instance LISTENs on its own connection from a background thread and reports
other instances' changes as ``(domain, key)`` as soon as they arrive (milliseconds on a LAN).
When that connection breaks, the thread reconnects with backoff and then reports
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
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ratekeeper.config.changes import (
    PAGE_SIZE,
    Callback,
    Subscribers,
    check_key,
    logger,
    paged,
    where,
)
from ratekeeper.errors import ConfigError, ConfigStoreError, MissingExtraError
from ratekeeper.overrides import Override

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


class PostgresConfigStore:
    """A ``ConfigStore`` in the table ``table`` of the PostgreSQL database at ``url``.

    The table (and the notification channel, named like it) is created if missing. ``timeout``
    bounds each connection attempt and each statement, in seconds. One connection, guarded by
    a lock, serves every thread; the listener has its own.
    """

    def __init__(
        self,
        url: str,
        *,
        table: str = "ratekeeper_overrides",
        timeout: float = 5.0,
        page_size: int = PAGE_SIZE,
    ) -> None:
        if not _TABLE.fullmatch(table):
            raise ConfigError(f"table must be a lower-case SQL identifier, not {table!r}")
        self.table = table
        self._table = sql.Identifier(table)
        self._page_size = page_size
        millis = max(1, int(timeout * 1000))
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
            message = str(error).replace(url, _redacted(url))
            raise ConfigStoreError(f"bad PostgreSQL URL: {message}") from None
        self.where = (
            f"PostgreSQL configuration store {params.get('host', 'localhost')}:"
            f"{params.get('port', 5432)}/{params.get('dbname', '')}"
        )
        # Composed once: the table never changes, and get runs on every plan-cache miss.
        self._select = sql.SQL("SELECT config FROM {} WHERE domain = %s AND key = %s").format(
            self._table
        )
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
        self._lock = threading.RLock()
        self._db: psycopg.Connection[Any] | None = None
        self._own_pid = 0
        self._subscribers = Subscribers()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._run("cannot create the table", self._create)

    # -- the connection --------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self._conninfo, autocommit=True)

    def _run(self, doing: str, operation: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``operation`` on the shared connection; errors become ``ConfigStoreError``."""
        with self._lock:
            for attempt in range(2):
                fresh = self._db is None or self._db.closed
                try:
                    if self._db is None or self._db.closed:  # as fresh, narrowed for mypy
                        self._db = self._connect()
                        self._own_pid = self._db.info.backend_pid
                    return operation(self._db)
                except psycopg.Error as error:
                    broken = self._db is None or self._db.broken or self._db.closed
                    if broken and self._db is not None:
                        self._db.close()
                        self._db = None
                    if broken and not fresh and attempt == 0:
                        continue  # an idle connection found dead: reconnect and retry once
                    raise ConfigStoreError(f"{self.where}: {doing}: {error}") from error
        raise AssertionError("unreachable")

    def _fetch(self, doing: str, query: sql.Composed, parameters: tuple[Any, ...]) -> list[Any]:
        return self._run(doing, lambda db: db.execute(query, parameters).fetchall())

    def _create(self, db: psycopg.Connection[Any]) -> None:
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

    # -- the contract ----------------------------------------------------------------------

    def get(self, key: str, domain: str = "") -> Override | None:
        check_key(key, domain)
        rows = self._fetch("cannot read", self._select, (domain, key))
        return Override.from_dict(rows[0][0], where(domain, key)) if rows else None

    def set(self, key: str, override: Override, domain: str = "") -> None:
        check_key(key, domain)
        parameters = (domain, key, override.to_json(), self.table, _payload(domain, key))
        self._fetch("cannot write", self._upsert, parameters)
        self._subscribers.notify(domain, key)

    def delete(self, key: str, domain: str = "") -> bool:
        check_key(key, domain)
        parameters = (domain, key, self.table, _payload(domain, key))
        rows = self._fetch("cannot delete", self._delete, parameters)
        if rows:
            self._subscribers.notify(domain, key)
        return bool(rows)

    def items(
        self, domain: str | None = None, prefix: str = ""
    ) -> Iterator[tuple[str, str, Override]]:
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

        def fetch(after: tuple[str, str]) -> list[Any]:
            return self._fetch("cannot list", query, (*after, *filters, self._page_size))

        for row_domain, key, config in paged(fetch, (domain or "", ""), self._page_size):
            yield row_domain, key, Override.from_dict(config, where(row_domain, key))

    # -- changes from other instances ------------------------------------------------------

    def subscribe(self, callback: Callback) -> None:
        if not self._subscribers.add(callback):
            return
        try:
            listener: psycopg.Connection[Any] | None = self._listen()
        except psycopg.Error as error:
            logger.warning("%s: cannot listen yet, retrying: %s", self.where, error)
            listener = None
        self._thread = threading.Thread(
            target=self._listen_loop,
            args=(listener,),
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

    def _listen_loop(self, listener: psycopg.Connection[Any] | None) -> None:
        delay = BACKOFF[0]
        while not self._stop.is_set():
            if listener is None:
                try:
                    listener = self._listen()
                except psycopg.Error as error:
                    logger.warning("%s: cannot listen, retrying: %s", self.where, error)
                    self._stop.wait(delay)
                    delay = min(delay * 2, BACKOFF[1])
                    continue
                delay = BACKOFF[0]
                self._subscribers.notify(None, None)  # what was sent meanwhile is lost
            try:
                for notify in listener.notifies(timeout=0.25):
                    if notify.pid != self._own_pid:  # this instance reported its own already
                        self._subscribers.notify(*_parse(notify.payload))
                    if self._stop.is_set():
                        break
            except psycopg.Error as error:
                logger.warning("%s: lost the listener, reconnecting: %s", self.where, error)
                listener.close()
                listener = None
        if listener is not None:
            listener.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def _redacted(url: str) -> str:
    """``url`` without its password."""
    scheme, _, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"


def _payload(domain: str, key: str) -> str:
    payload = json.dumps({"domain": domain, "key": key}, ensure_ascii=False)
    return payload if len(payload.encode()) <= MAX_PAYLOAD else ""


def _parse(payload: str) -> tuple[str | None, str | None]:
    try:
        data = json.loads(payload)
        return str(data["domain"]), str(data["key"])
    except (ValueError, TypeError, KeyError):
        return None, None
