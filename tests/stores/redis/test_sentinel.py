"""redis+sentinel://: the store finds the master through a real Sentinel."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratekeeper import Limit, Limiter, StoreError, open_store
from tests.servers import RedisServer, ReplyError, command


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


@pytest.mark.slow
def test_store_through_sentinels_that_ask_for_a_password(tmp_path: Path) -> None:
    """Sentinels with ``requirepass`` of their own, in front of a master with another: the
    master's password in the URL's user information, the sentinels' in
    ``?sentinel_password=`` (the reference's ``REDIS_SENTINEL_AUTH``)."""
    master = RedisServer(tmp_path / "master")
    sentinel = None
    try:
        command(master.port, "CONFIG", "SET", "requirepass", "master-pw")
        config = tmp_path / "sentinel.conf"
        config.write_text(
            f"sentinel monitor primary 127.0.0.1 {master.port} 1\n"
            "sentinel auth-pass primary master-pw\n"
            "sentinel down-after-milliseconds primary 1000\n"
        )
        sentinel = RedisServer(tmp_path / "sentinel", None, "--sentinel", config=config)
        # set once it has started: the readiness check reads INFO without a password
        command(sentinel.port, "ACL", "SETUSER", "default", "on", "resetpass", ">sentinel-pw")
        with pytest.raises(ReplyError, match="NOAUTH"):
            command(sentinel.port, "SENTINEL", "MASTERS")
        base = f"redis+sentinel://:master-pw@127.0.0.1:{sentinel.port}/primary"
        limiter = Limiter(open_store(f"{base}?sentinel_password=sentinel-pw", on_store_error=None))
        limit = Limit(2, 60, "gcra")
        assert [limiter.hit("sentinel-user", limit).allowed for _ in range(3)] == [
            True,
            True,
            False,
        ]
        limiter.close()
        refused = Limiter(open_store(base, on_store_error=None))
        with pytest.raises(StoreError, match=r"(?i)auth"):
            refused.hit("sentinel-user", limit)
        refused.close()
    finally:
        if sentinel is not None:
            sentinel.stop()
        master.stop()
