"""A synchronous client of an ASGI app in-process: the app runs, lifespan included, on an event
loop in a thread of its own, and each request goes through httpx's ASGI transport there. And
``service_app``, the service's app as most of these tests build it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from starlette.applications import Starlette

from ratekeeper import AsyncEngine
from ratekeeper.config import open_config_store
from ratekeeper.rules import parse_rules
from ratekeeper.service.runtime.app import build_app, create_app
from ratekeeper.service.runtime.settings import ListenAddress, Settings
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock
from tests.processes import free_port

T = TypeVar("T")


def service_app(
    rules: str, directory: Path, clock: FakeClock, *, dashboard: bool = False, **options: Any
) -> Starlette:
    """``create_app`` over an engine of ``rules`` (YAML text), a memory store on ``clock`` and a
    SQLite configuration store in ``directory``; the app closes the engine. ``options`` go to
    ``create_app`` (``admin_token``, ``ietf_headers``, ...); ``dashboard`` adds the metrics and
    the dashboard, open to the ``admin_token`` given."""
    engine = AsyncEngine(
        AsyncMemoryStore(clock=clock),
        rules=parse_rules(rules, "rules.yaml"),
        config=open_config_store(f"sqlite:///{directory}/config.db"),
        clock=clock,
    )
    if dashboard:
        from ratekeeper.service.dashboard import Dashboard, Recorder
        from ratekeeper.service.observe.metrics import Metrics

        metrics = Metrics()
        metrics.track(engine)
        recorder = Recorder(engine, metrics, clock=clock)
        options["metrics"] = metrics
        options["dashboard"] = Dashboard(
            engine, metrics, recorder, options["admin_token"], clock=clock
        )
    return create_app(engine, close_engine=True, **options)


class AppClient:
    """``with AppClient(app) as client: client.post("/v1/check", json=...)``."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://service"
        )
        self._lifespan: AbstractAsyncContextManager[Any] | None = None

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=60)

    def __enter__(self) -> Self:
        self._thread.start()
        self._lifespan = self.app.router.lifespan_context(self.app)
        self._run(self._lifespan.__aenter__())
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._lifespan is not None
        self._run(self._lifespan.__aexit__(None, None, None))
        self._run(self._client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def request(self, method: str, url: str, **options: Any) -> httpx.Response:
        return self._run(self._client.request(method, url, **options))

    def get(self, url: str, **options: Any) -> httpx.Response:
        return self.request("GET", url, **options)

    def post(self, url: str, **options: Any) -> httpx.Response:
        return self.request("POST", url, **options)

    def put(self, url: str, **options: Any) -> httpx.Response:
        return self.request("PUT", url, **options)

    def delete(self, url: str, **options: Any) -> httpx.Response:
        return self.request("DELETE", url, **options)


def settings_app(**values: Any) -> Starlette:
    """``build_app`` of ``Settings(**values)``, its gRPC server on a free port rather than the
    default 127.0.0.1:8081, which another test's service may hold (gRPC binds with
    SO_REUSEPORT: both would listen, and each take the other's calls)."""
    values.setdefault("grpc", ListenAddress("127.0.0.1", free_port()))
    return build_app(Settings(**values))
