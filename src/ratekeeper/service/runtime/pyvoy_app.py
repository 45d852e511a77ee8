"""The app ``ratekeeper serve --server pyvoy`` runs in Envoy: HTTP and gRPC as one ASGI app.

``grpc_or_http(grpc, http)`` sends each request whose ``content-type`` is gRPC's
(``application/grpc``, or ``application/grpc+proto`` and the like) to ``grpc``
(``grpc_asgi.GrpcApp``) and everything else, the lifespan included, to ``http``, the service's
HTTP app: one engine and one store for the HTTP API, nginx ``auth_request`` and Envoy's gRPC.

``app``, the attribute pyvoy imports (``ratekeeper.service.runtime.pyvoy_app:app``), is that
app built from the ``RATEKEEPER_*`` variables (``ratekeeper.service.runtime.pyvoy_server`` sets
them) the first time it is read, with the log configured as they say.
"""

from __future__ import annotations

from ratekeeper.service.asgi import App, Receive, Scope, Send
from ratekeeper.service.grpc import RateLimitServicer
from ratekeeper.service.grpc.asgi import GrpcApp
from ratekeeper.service.observe.logs import configure_logging
from ratekeeper.service.runtime import collector
from ratekeeper.service.runtime.app import build_parts, envoy_header_names
from ratekeeper.service.runtime.settings import Settings


def is_grpc(content_type: bytes) -> bool:
    """Whether ``content_type`` is gRPC's: ``application/grpc``, then nothing, ``+`` or ``;``."""
    return content_type.startswith(b"application/grpc") and content_type[16:17] in (
        b"",
        b"+",
        b";",
    )


def grpc_or_http(grpc: App, http: App) -> App:
    """One ASGI app: gRPC requests to ``grpc``, the rest (and the lifespan) to ``http``."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"content-type":
                    if is_grpc(value):
                        await grpc(scope, receive, send)
                        return
                    break
        await http(scope, receive, send)

    return app


def build(settings: Settings) -> App:
    """The service of ``settings`` as one app (see the module)."""
    parts = build_parts(settings, grpc_aio=False)
    servicer = RateLimitServicer(
        parts.engine,
        parts.metrics,
        parts.in_flight_bound,
        envoy_header_names(settings),
        dynamic_metadata=settings.dynamic_metadata,
    )
    return grpc_or_http(
        GrpcApp(servicer, parts.access_log, parts.tracing, parts.health_check), parts.http
    )


_built: list[App] = []


def __getattr__(name: str) -> App:
    """``app``: built from the environment the first time it is read."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _built:
        settings = Settings.read(None)
        configure_logging(settings.log_format, settings.log_level, libraries=settings.log_libraries)
        _built.append(build(settings))
        collector.tune(settings.server)
    return _built[0]
