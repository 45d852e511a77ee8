"""Traces (``--tracing``, off by default): one OpenTelemetry span a decision request, any surface.

Each request to a decision route (``POST /v1/check``, ``/v1/check/batch``, ``/v1/peek``,
Envoy's ``POST /json``, nginx's ``GET /v1/nginx``) and each gRPC ``ShouldRateLimit`` call is
one span of kind ``SERVER``, from its arrival to its answer, sent to an OpenTelemetry collector
over OTLP (``otlp-http``: HTTP and protobuf; ``otlp-grpc``: gRPC), as the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_EXPORTER_OTLP_HEADERS`` (and the other ``OTEL_EXPORTER_OTLP_*`` variables) say. Its
name is the request (``POST /v1/check``) or the gRPC method
(``envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit``); its attributes:

``ratekeeper.surface``
    ``http``, ``json``, ``nginx`` or ``grpc``, as the access log names them;
``http.request.method``, ``http.route``, ``http.response.status_code``
    over HTTP; ``rpc.system`` (``grpc``), ``rpc.service``, ``rpc.method`` and
    ``rpc.grpc.status_code`` over gRPC;
``ratekeeper.domain``, ``ratekeeper.rule``, ``ratekeeper.result``
    for a request that was decided: as the access log's ``domain``, ``rule`` and ``result``
    (``labels.decided``);
``ratekeeper.rules``
    the rules of every descriptor decided, each once, in the request's order.

No key, no descriptor value, no query string and no error message is ever an attribute: they
are the clients' data. A 5xx answer, or a gRPC status a server fails with (``UNAVAILABLE``,
``INTERNAL``, ...), sets the span's status to ``ERROR``, without a description.

A caller's trace is continued: its context (W3C ``traceparent`` and ``tracestate``, or B3's
``b3`` or ``x-b3-*``, as envoyproxy/ratelimit reads it; or what ``OTEL_PROPAGATORS`` names) is
read from the HTTP headers or the gRPC metadata, which is where Envoy's rate-limit filter puts
it when Envoy traces. Sampling is parent-based, as
envoyproxy/ratelimit samples: a span whose caller sampled it is sampled, one whose caller did
not is not, and one with no caller's context is sampled at the rate given (0 to 1). The
resource names the service (``service.name``: the name given, else ``$OTEL_SERVICE_NAME``, else
``ratekeeper``), its namespace if given, and its instance (given, else a random UUID: each
worker process is one instance and exports its own spans). The spans are sent in batches from
a thread, and the last ones when the service stops (``Tracing.close``).

The OpenTelemetry SDK and its exporters are the ``tracing`` extra, imported by ``start`` only:
without tracing the service imports none of them, and its surfaces call nothing of this module
(they are wrapped only when tracing is on).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from ratekeeper.core.errors import MissingExtraError
from ratekeeper.service.asgi import App, Message, Receive, Scope, Send
from ratekeeper.service.observe.access import ROUTES
from ratekeeper.service.observe.labels import Noted, decided, rule_label

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from ratekeeper.engine import AsyncEngine, Status
    from ratekeeper.engine.verdict import Observer

#: The exporters ``--tracing`` chooses from, by name; ``off`` exports nothing.
PROTOCOLS = ("off", "otlp-http", "otlp-grpc")
#: The gRPC service whose calls are traced.
GRPC_SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
#: The gRPC statuses a server fails with (OpenTelemetry's semantic conventions): a span ending
#: with one is an error.
_SERVER_ERRORS = frozenset(
    {"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"}
)
_noted: ContextVar[Noted | None] = ContextVar("ratekeeper_tracing_noted", default=None)

T = TypeVar("T")


def require() -> None:
    """Raise ``MissingExtraError`` unless the ``tracing`` extra (the OpenTelemetry SDK and its
    OTLP exporters) is installed."""
    for module, package in (
        ("opentelemetry.sdk.trace", "opentelemetry-sdk"),
        ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry-exporter-otlp"),
        ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "opentelemetry-exporter-otlp"),
        ("opentelemetry.propagators.b3", "opentelemetry-propagator-b3"),
    ):
        try:
            __import__(module)
        except ImportError:
            raise MissingExtraError(package, "tracing") from None


class Tracing:
    """The traces of the service over ``engine``, made by ``tracer`` (of ``provider``, which
    ``close`` shuts down): made, it becomes ``engine``'s observer, passing every decision on
    to the observer it had."""

    def __init__(
        self, engine: AsyncEngine, tracer: Tracer, provider: TracerProvider | None = None
    ) -> None:
        from opentelemetry.trace import SpanKind, StatusCode
        from opentelemetry.trace import Status as SpanStatus

        self._tracer = tracer
        self._provider = provider
        self._extract = _extractor()
        self._server = SpanKind.SERVER
        self._error = SpanStatus(StatusCode.ERROR)
        self._next: Observer | None = engine.observer
        self._default = engine.planner.default
        engine.observer = self._observe

    def _observe(self, domain: str, statuses: tuple[Status, ...]) -> None:
        noted = _noted.get()
        if noted is not None:
            noted.append((domain, statuses))
        observer = self._next
        if observer is not None:
            observer(domain, statuses)

    async def asgi(self, app: App, scope: Scope, receive: Receive, send: Send) -> None:
        """``app(scope, receive, send)``, a request to a decision route traced."""
        surface = ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if surface is None:
            await app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        span = self._start(
            f"{method} {path}",
            _HEADERS,
            scope["headers"],
            {"ratekeeper.surface": surface, "http.request.method": method, "http.route": path},
        )
        status = 500  # unless an answer starts

        async def answer(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        noted: Noted = []
        token = _noted.set(noted)
        try:
            await app(scope, receive, answer)
        finally:
            _noted.reset(token)
            self._end(span, noted, {"http.response.status_code": status}, status >= 500)

    def grpc(
        self, method: Callable[[Any, Any], Awaitable[T]]
    ) -> Callable[[Any, Any], Awaitable[T]]:
        """The gRPC handler ``method`` (``ShouldRateLimit``), each call traced; its context's
        ``invocation_metadata()`` carries the caller's trace context, if any."""
        name = method.__name__
        common = {
            "ratekeeper.surface": "grpc",
            "rpc.system": "grpc",
            "rpc.service": GRPC_SERVICE,
            "rpc.method": name,
        }

        async def traced(request: Any, context: Any) -> T:
            span = self._start(
                f"{GRPC_SERVICE}/{name}", _METADATA, context.invocation_metadata() or (), common
            )
            noted: Noted = []
            token = _noted.set(noted)
            code, number = "OK", 0
            try:
                return await method(request, context)
            except asyncio.CancelledError:  # the client went away
                code, number = "CANCELLED", 1
                raise
            except BaseException:
                found = context.code()
                code = getattr(found, "name", None) or "UNKNOWN"
                number = found.value[0] if found is not None else 2
                raise
            finally:
                _noted.reset(token)
                self._end(span, noted, {"rpc.grpc.status_code": number}, code in _SERVER_ERRORS)

        return traced

    def _start(
        self, name: str, getter: Any, carrier: Iterable[Any], attributes: dict[str, Any]
    ) -> Span:
        parent = self._extract(carrier, getter=getter)
        return self._tracer.start_span(
            name, context=parent, kind=self._server, attributes=attributes
        )

    def _end(self, span: Span, noted: Noted, answer: dict[str, Any], failed: bool) -> None:
        if span.is_recording():
            span.set_attributes(answer)
            found = decided(noted, self._default)
            if found:
                span.set_attributes({f"ratekeeper.{key}": value for key, value in found.items()})
                default = self._default
                rules = [rule_label(one, default) for _, statuses in noted for one in statuses]
                span.set_attribute("ratekeeper.rules", list(dict.fromkeys(rules)))
            if failed:
                span.set_status(self._error)
        span.end()

    def close(self) -> None:
        """Send the spans not yet sent, then stop the exporter (each export bounded by
        ``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s by default); blocking, for a thread."""
        if self._provider is not None:
            self._provider.shutdown()


class _HeadersGetter:
    """The trace context in an ASGI scope's headers (``(name, value)`` in bytes, names in
    lower case)."""

    def get(self, carrier: Iterable[tuple[bytes, bytes]], key: str) -> list[str] | None:
        name = key.lower().encode("latin-1")
        found = [value.decode("latin-1") for header, value in carrier if header == name]
        return found or None

    def keys(self, carrier: Iterable[tuple[bytes, bytes]]) -> list[str]:
        return [header.decode("latin-1") for header, _ in carrier]


class _MetadataGetter:
    """The trace context in gRPC metadata (``(key, value)``; binary values ignored)."""

    def get(self, carrier: Iterable[tuple[str, Any]], key: str) -> list[str] | None:
        name = key.lower()
        found = [value for header, value in carrier if header == name and isinstance(value, str)]
        return found or None

    def keys(self, carrier: Iterable[tuple[str, Any]]) -> list[str]:
        return [header for header, _ in carrier]


_HEADERS, _METADATA = _HeadersGetter(), _MetadataGetter()


def _extractor() -> Callable[..., Any]:
    """What reads a caller's trace context: the propagators ``OTEL_PROPAGATORS`` names when it
    is set, else W3C trace context, B3 (one header or several) and W3C baggage, as
    envoyproxy/ratelimit reads them."""
    from opentelemetry import propagate

    if os.environ.get("OTEL_PROPAGATORS"):
        return propagate.extract
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.propagators.b3 import B3MultiFormat
    from opentelemetry.propagators.composite import CompositePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagators = [TraceContextTextMapPropagator(), B3MultiFormat(), W3CBaggagePropagator()]
    return CompositePropagator(propagators).extract


def start(
    engine: AsyncEngine,
    protocol: str,
    *,
    sample_rate: float = 1.0,
    service_name: str | None = None,
    service_namespace: str = "",
    service_instance_id: str = "",
) -> Tracing:
    """The traces of the service over ``engine``, exported over ``protocol`` (``otlp-http`` or
    ``otlp-grpc``) from a thread of this process, sampled at ``sample_rate`` unless the caller
    decided, their resource named by ``service_name`` (None: ``$OTEL_SERVICE_NAME``, else
    ``ratekeeper``), ``service_namespace`` (if not empty) and ``service_instance_id`` (empty: a
    random UUID). Raises ``MissingExtraError`` without the ``tracing`` extra, ``ValueError``
    for a protocol that is none of ``PROTOCOLS`` but ``off``."""
    if protocol not in PROTOCOLS[1:]:
        raise ValueError(f"expected one of {', '.join(PROTOCOLS[1:])}, not {protocol!r}")
    require()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    exporter: Any
    if protocol == "otlp-http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as OTLPGrpcSpanExporter,
        )

        exporter = OTLPGrpcSpanExporter()
    provider = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(sample_rate)),
        resource=_resource(Resource, service_name, service_namespace, service_instance_id),
        shutdown_on_exit=False,  # Tracing.close does it, on the event loop's way out
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(engine, provider.get_tracer("ratekeeper.service"), provider)


def _resource(resource: Any, name: str | None, namespace: str, instance: str) -> Any:
    """The ``Resource`` of the spans: OpenTelemetry's own (``OTEL_RESOURCE_ATTRIBUTES``,
    ``OTEL_SERVICE_NAME``), under the service's name, namespace and instance given."""
    given: dict[str, str] = {}
    if name:
        given["service.name"] = name
    if namespace:
        given["service.namespace"] = namespace
    if instance:
        given["service.instance.id"] = instance
    found = resource.create(given)
    if str(found.attributes.get("service.name", "")).startswith("unknown_service"):
        found = found.merge(resource({"service.name": "ratekeeper"}))
    if "service.instance.id" not in found.attributes:
        found = found.merge(resource({"service.instance.id": str(uuid.uuid4())}))
    return found
