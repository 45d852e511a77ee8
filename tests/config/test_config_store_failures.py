"""How the configuration stores fail: bounded in time, as ``ConfigStoreError`` naming the store,
and recovering by themselves; and how ``open_config_store`` reads its URLs."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from ratekeeper.config import open_config_store, redacted
from ratekeeper.config.postgres import PostgresConfigStore
from ratekeeper.config.sqlite import SQLiteConfigStore
from ratekeeper.core.errors import ConfigError, ConfigStoreError
from ratekeeper.core.overrides import Override
from tests.servers import PostgresServer

FIVE = Override(5, 1)


def test_unknown_scheme_names_the_known() -> None:
    with pytest.raises(ConfigError) as caught:  # also a ValueError
        open_config_store("redis://127.0.0.1:6379/0")
    assert str(caught.value) == (
        "unknown configuration store URL scheme 'redis'; expected one of:"
        " postgres://, postgresql://, sqlite://"
    )


def test_sqlite_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_config_store("sqlite:///relative.db")
    store.set("k", FIVE)
    store.close()
    assert (tmp_path / "relative.db").exists()
    absolute = tmp_path / "sub" / "absolute.db"
    absolute.parent.mkdir()
    store = open_config_store(f"sqlite:///{absolute}")
    store.set("k", FIVE)
    store.close()
    assert absolute.exists()
    for url in ("sqlite://:memory:", "sqlite:///:memory:"):
        store = open_config_store(url)
        store.set("k", FIVE)
        assert list(store.items()) == [("", "k", FIVE)]
        store.close()
    with pytest.raises(ValueError, match=r"expected sqlite:///relative\.db"):
        open_config_store("sqlite://")


def test_sqlite_write_waits_for_the_lock_then_fails(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    store = SQLiteConfigStore(path, timeout=0.3)
    assert store.get("k") is None  # the first call opens the file and creates the table
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    with pytest.raises(ConfigStoreError) as caught:
        store.set("k", FIVE)
    waited = time.monotonic() - started
    assert str(caught.value) == (
        f"SQLite configuration store {path}: cannot write: database is locked"
    )
    assert 0.25 <= waited < 3
    assert store.get("k") is None  # readers are not blocked by a writer
    other.execute("ROLLBACK")
    store.set("k", FIVE)
    assert store.get("k") == FIVE
    other.close()
    store.close()


def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    SQLiteConfigStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version=2")
    db.close()
    store = SQLiteConfigStore(path)  # opens nothing yet
    with pytest.raises(ConfigStoreError, match="schema version 2 is newer than this ratekeeper"):
        store.get("k")
    store.close()


def test_sqlite_cannot_open() -> None:
    store = SQLiteConfigStore("/nonexistent-directory/config.db")
    with pytest.raises(ConfigStoreError, match="cannot open: unable to open database file"):
        store.set("k", FIVE)
    store.close()


def test_sqlite_opening_an_existing_store_takes_no_lock(tmp_path: Path) -> None:
    """A reader opening a store while another process writes neither waits nor fails."""
    path = tmp_path / "busy.db"
    writer = SQLiteConfigStore(path)
    writer.set("k", FIVE)
    writer.close()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    for create in (True, False):
        store = SQLiteConfigStore(path, timeout=0.1, create=create)
        assert store.get("k") == FIVE
        store.close()
    other.execute("ROLLBACK")
    other.close()


def test_postgres_connect_is_bounded() -> None:
    """A server that accepts TCP connections and never answers: the connect times out."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        store = open_config_store(f"postgresql://postgres@127.0.0.1:{port}/postgres", timeout=1.0)
        started = time.monotonic()
        with pytest.raises(ConfigStoreError) as caught:
            store.get("k")
        waited = time.monotonic() - started
    assert str(caught.value).startswith(
        f"PostgreSQL configuration store 127.0.0.1:{port}/postgres: cannot connect:"
    )
    assert waited < 10


def test_postgres_statement_is_bounded(postgres_server: PostgresServer) -> None:
    store = open_config_store(postgres_server.url, table="locked", timeout=0.5)
    store.set("k", FIVE)
    with psycopg.connect(postgres_server.url) as other:
        other.execute("LOCK TABLE locked IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(ConfigStoreError, match="cannot read: canceling statement due to"):
            store.get("k")
        waited = time.monotonic() - started
        other.rollback()
    assert 0.4 <= waited < 3
    assert store.get("k") == FIVE  # the same connection goes on
    store.close()


def test_postgres_refuses_a_bad_table_name(postgres_server: PostgresServer) -> None:
    with pytest.raises(ValueError, match="table must be a lower-case SQL identifier"):
        open_config_store(postgres_server.url, table='x"; DROP TABLE y; --')


def test_postgres_recovers_after_a_crash(tmp_path: Path) -> None:
    server = PostgresServer()
    try:
        store = open_config_store(server.url, timeout=2.0)
        store.set("k", FIVE)
        server.kill()  # SIGKILL: the server recovers from its WAL on the next start
        with pytest.raises(ConfigStoreError):
            store.set("k", Override(6, 1))
        server.start()
        assert store.get("k") == FIVE
        store.set("k", Override(6, 1))
        assert store.get("k") == Override(6, 1)
        store.close()
    finally:
        server.remove()


def test_missing_psycopg_names_the_extra() -> None:
    script = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from ratekeeper.config import open_config_store\n"
        "try:\n"
        "    open_config_store('postgresql://127.0.0.1/x')\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout == (
        "MissingExtraError psycopg is not installed; install it with:"
        " pip install 'ratekeeper[postgres]'\n"
    )


def test_postgres_bad_url_hides_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        PostgresConfigStore("postgresql://user:secret@[::1/db")
    assert "secret" not in str(caught.value)
    assert str(caught.value).startswith("bad PostgreSQL URL: ")
    assert "postgresql://user:***@[::1/db" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://user:secret@host:5432/db", "postgresql://user:***@host:5432/db"),
        ("postgresql://:secret@host/db", "postgresql://:***@host/db"),
        ("postgresql://user@host/db", "postgresql://user@host/db"),
        ("postgresql://user:p@ss@host/db?x=a@b", "postgresql://user:***@host/db?x=a@b"),
        (
            "postgresql://host/db?password=secret&sslmode=require",
            "postgresql://host/db?password=***&sslmode=require",
        ),
        ("host=db password=secret user=rk", "host=db password=*** user=rk"),
        ("host=db password='se cret' user=rk", "host=db password=*** user=rk"),
        ("redis://:secret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("sqlite:///ratekeeper.db", "sqlite:///ratekeeper.db"),
    ],
)
def test_redacted_masks_every_password(url: str, shown: str) -> None:
    assert redacted(url) == shown
