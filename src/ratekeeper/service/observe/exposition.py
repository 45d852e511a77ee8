"""The metrics served to Prometheus: ``MetricsApp``, the ASGI app of ``Metrics.app``, at
``/metrics`` of the service or of any ASGI router."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, make_asgi_app

from ratekeeper.service.asgi import Receive, Scope, Send


class MetricsApp:
    """An ASGI application serving the metrics of ``registry`` to Prometheus: mount it at
    ``/metrics``.

    ``GET`` answers in the format the scraper's ``Accept`` asks for (Prometheus text, else
    OpenMetrics), gzipped when accepted, as prometheus_client serves them; any other method
    gets 405. ``refresh`` is awaited first (``Metrics.refresh``: an async engine's store is
    pinged).
    """

    def __init__(self, registry: CollectorRegistry, refresh: Callable[[], Awaitable[None]]) -> None:
        self._refresh = refresh
        self._serve = make_asgi_app(registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise ValueError(f"the metrics app serves HTTP, not {scope['type']!r}")
        if scope["method"] != "GET":
            await send(
                {
                    "type": "http.response.start",
                    "status": 405,
                    "headers": [(b"allow", b"GET"), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await self._refresh()
        await self._serve(scope, receive, send)


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop: acknowledge, so that the app also runs on its own."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
