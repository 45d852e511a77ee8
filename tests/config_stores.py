"""Where the configuration-store tests keep their stores: a fresh SQLite file, or a fresh
table on the session's real PostgreSQL server. ``KINDS`` names both."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

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
