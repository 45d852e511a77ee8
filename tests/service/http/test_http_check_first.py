"""``POST /v1/check`` skips Starlette's middleware and router: its answers, errors included,
must be those the router gives, and middleware added to the app must still see it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from ratekeeper import AsyncEngine
from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit
from ratekeeper.service.runtime.app import create_app
from ratekeeper.stores.memory import AsyncMemoryStore

CHECK = {"key": "user:1", "limit": "5/minute"}


class FailingStore(AsyncMemoryStore):
    """A store that fails in a way ratekeeper does not expect."""

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision:
        raise RuntimeError("the store broke")


def post(app: ASGIApp, path: str, body: Any) -> httpx.Response:
    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://service") as client:
            return await client.post(path, json=body)

    return asyncio.run(run())


def test_an_unexpected_error_is_answered_as_on_every_other_route(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(AsyncEngine(FailingStore()))
    check, peek = post(app, "/v1/check", CHECK), post(app, "/v1/peek", CHECK)
    assert check.status_code == peek.status_code == 500
    assert check.headers["content-type"] == "application/problem+json"
    assert check.json() == peek.json()
    assert "Traceback" not in check.text
    assert caplog.text.count("RuntimeError: the store broke") >= 2  # logged on both routes


def test_bad_input_and_other_methods_are_answered_as_before() -> None:
    app = create_app(AsyncEngine(AsyncMemoryStore()))
    assert post(app, "/v1/check", {"key": ""}).status_code == 422
    assert post(app, "/v1/check", CHECK).json()["statuses"][0]["remaining"] == 4

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://service") as client:
            return await client.get("/v1/check")

    assert asyncio.run(get()).status_code == 405


def test_added_middleware_sees_the_check_route() -> None:
    seen: list[str] = []

    class Recording:
        def __init__(self, app: ASGIApp) -> None:
            self.app = app

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                seen.append(scope["path"])
            await self.app(scope, receive, send)

    app = create_app(AsyncEngine(AsyncMemoryStore()))
    app.add_middleware(Recording)
    assert post(app, "/v1/check", CHECK).status_code == 200
    assert seen == ["/v1/check"]
