"""redis+sentinel://: the store finds the master through a real Sentinel."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratekeeper import Limit, Limiter, open_store
from tests.servers import RedisServer


@pytest.mark.slow
def test_store_through_sentinel(tmp_path: Path, redis_server: RedisServer) -> None:
    config = tmp_path / "sentinel.conf"
    config.write_text(
        f"sentinel monitor primary 127.0.0.1 {redis_server.port} 1\n"
        "sentinel down-after-milliseconds primary 1000\n"
    )
    # A sentinel reads its config file as the first argument, and rewrites it.
    sentinel = RedisServer(tmp_path / "sentinel", None, "--sentinel", config=config)
    try:
        limiter = Limiter(
            open_store(f"redis+sentinel://127.0.0.1:{sentinel.port}/primary", on_store_error=None)
        )
        limit = Limit(2, 60, "gcra")
        assert [limiter.hit("sentinel-user", limit).allowed for _ in range(3)] == [
            True,
            True,
            False,
        ]
        limiter.close()
    finally:
        sentinel.stop()
