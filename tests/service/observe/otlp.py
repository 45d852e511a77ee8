"""An OpenTelemetry collector for the tracing tests, in the test process, on a free loopback
port: ``HttpReceiver`` takes OTLP over HTTP (``POST /v1/traces``, protobuf), ``GrpcReceiver``
over gRPC (``TraceService/Export``). Each keeps every span it was sent, with its resource's
attributes (``Received``), and answers as a collector does."""

from __future__ import annotations

import gzip
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from tests.servers import free_ports


class Received(NamedTuple):
    """One span as a collector got it: its resource's attributes, its own, and the span."""

    resource: dict[str, Any]
    attributes: dict[str, Any]
    span: trace_pb2.Span


def value_of(value: common_pb2.AnyValue) -> Any:
    """An attribute's value in Python: text, a number, a bool, or a list of them."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(one) for one in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


def attributes_of(attributes: Any) -> dict[str, Any]:
    return {one.key: value_of(one.value) for one in attributes}


class _Receiver:
    """What both receivers keep: the spans of every request, in the order they came."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[Received] = []
        self.exports = 0

    def _take(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = attributes_of(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(Received(resource, attributes_of(span.attributes), span))
        with self._lock:
            self._spans.extend(found)
            self.exports += 1

    def spans(self) -> list[Received]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Received]:
        """The spans once there are ``count`` (more fails at once; fewer by ``timeout``)."""
        deadline = time.monotonic() + timeout
        while len(spans := self.spans()) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(spans) == count, f"expected {count} spans, got {len(spans)}"
        return spans


class HttpReceiver(_Receiver):
    """OTLP over HTTP at ``endpoint`` (``http://127.0.0.1:PORT``, the value of
    ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""

    def __init__(self) -> None:
        super().__init__()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                receiver._take(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        (port,) = free_ports(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.endpoint = f"http://127.0.0.1:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


class GrpcReceiver(_Receiver):
    """OTLP over gRPC at ``endpoint`` (``http://127.0.0.1:PORT``: plaintext)."""

    def __init__(self) -> None:
        super().__init__()
        receiver = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(
                self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
            ) -> trace_service_pb2.ExportTraceServiceResponse:
                receiver._take(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self._executor = futures.ThreadPoolExecutor(max_workers=2)
        self._server = grpc.server(self._executor)
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self._server)
        (port,) = free_ports(1)
        self._server.add_insecure_port(f"127.0.0.1:{port}")
        self._server.start()
        self.endpoint = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self._server.stop(None).wait(10)
        self._executor.shutdown()
