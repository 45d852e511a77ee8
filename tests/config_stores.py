"""Where the configuration-store tests keep their stores: a fresh SQLite file, or a fresh
table on the session's real PostgreSQL server. ``KINDS`` names both."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

KINDS = ["sqlite", "postgres"]


def fresh_store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[str, dict[str, Any]]:
    """``(url, options)`` of an empty store of ``kind``, for ``open_config_store``."""
    if kind == "sqlite":
        name = f"config-{uuid.uuid4().hex[:8]}.db"
        return f"sqlite:///{tmp_path / name}", {}
    server = request.getfixturevalue("postgres_server")
    return server.url, {"table": f"overrides_{uuid.uuid4().hex[:12]}"}


def write_raw(url: str, options: dict[str, Any], domain: str, key: str, config: str) -> None:
    """Store ``config`` (JSON text) as ``key``'s override behind the store's back, as plain SQL
    would, whether it is a valid override or not."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url[len("sqlite:///") :]) as db:
            db.execute(
                "INSERT INTO overrides (domain, key, config, updated_at) VALUES (?, ?, ?, 0)",
                (domain, key, config),
            )
        db.close()
        return
    table = psycopg.sql.Identifier(options["table"])
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            psycopg.sql.SQL(
                "INSERT INTO {} (domain, key, config) VALUES (%s, %s, %s::jsonb)"
            ).format(table),
            (domain, key, config),
        )


def exists(url: str, options: dict[str, Any]) -> bool:
    """Whether the store's file (SQLite) or table (PostgreSQL) exists."""
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///") :]).exists()
    with psycopg.connect(url, autocommit=True) as db:
        found = db.execute("SELECT to_regclass(%s)", (options["table"],)).fetchone()
    return found is not None and found[0] is not None
