"""A misconfigured request store behind the service: a clear 503 naming the problem, never a
500, never a fail-open 200; and readiness says so."""

from __future__ import annotations

from pathlib import Path

from ratekeeper import AsyncEngine, open_async_store
from ratekeeper.service.http import create_app
from tests.servers import RedisServer, command
from tests.service.asgi import AppClient


def test_a_wrong_redis_password_is_a_503_under_the_allow_policy(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    try:
        command(server.port, "CONFIG", "SET", "requirepass", "s3cret")
        store = open_async_store(
            f"redis://:wrong@127.0.0.1:{server.port}/0", on_store_error="allow"
        )
        with AppClient(create_app(AsyncEngine(store), close_engine=True)) as client:
            answer = client.post("/v1/check", json={"key": "k", "limit": "5/minute"})
            assert answer.status_code == 503
            assert "invalid username-password pair" in answer.json()["detail"]
            assert "wrong" not in answer.text
            assert client.get("/readyz").status_code == 503
    finally:
        server.stop()
