"""redis+sentinel://: the store finds the master through a real Sentinel."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from ratekeeper import Limit, Limiter, open_store
from tests.servers import RedisServer, command, free_port, wait_until


@pytest.mark.slow
def test_store_through_sentinel(tmp_path: Path, redis_server: RedisServer) -> None:
    port = free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(
        f"port {port}\n"
        "bind 127.0.0.1\n"
        f"sentinel monitor primary 127.0.0.1 {redis_server.port} 1\n"
        "sentinel down-after-milliseconds primary 1000\n"
    )
    # A sentinel reads its config file as the first argument, and rewrites it.
    sentinel = subprocess.Popen(
        ["redis-server", str(config), "--sentinel"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _answers(port), 10, f"redis-sentinel on port {port}")
        limiter = Limiter(
            open_store(f"redis+sentinel://127.0.0.1:{port}/primary", on_store_error=None)
        )
        limit = Limit(2, 60, "gcra")
        assert [limiter.hit("sentinel-user", limit).allowed for _ in range(3)] == [
            True,
            True,
            False,
        ]
        limiter.close()
    finally:
        os.kill(sentinel.pid, signal.SIGTERM)
        sentinel.wait(10)


def _answers(port: int) -> bool:
    try:
        return command(port, "PING", timeout=0.2) == "PONG"
    except OSError:
        return False
