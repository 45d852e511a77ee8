"""Requests to an ASGI app in-process, through httpx's ASGI transport, from a client address
of the test's choosing (the connection's peer as the app sees it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

T = TypeVar("T")


def client(app: Any, peer: str = "127.0.0.1") -> httpx.AsyncClient:
    """An httpx client of ``app`` whose requests come from ``peer``."""
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://app")


def run(app: Any, steps: Callable[[httpx.AsyncClient], Awaitable[T]], peer: str = "127.0.0.1") -> T:
    """``steps(client)`` on a fresh event loop."""

    async def main() -> T:
        async with client(app, peer) as session:
            return await steps(session)

    return asyncio.run(main())


def get_all(
    app: Any, urls: list[str], peer: str = "127.0.0.1", **options: Any
) -> list[httpx.Response]:
    """GET each of ``urls`` in turn."""

    async def steps(session: httpx.AsyncClient) -> list[httpx.Response]:
        return [await session.get(url, **options) for url in urls]

    return run(app, steps, peer)
