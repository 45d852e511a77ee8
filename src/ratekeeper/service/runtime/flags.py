"""The flags of ``ratekeeper serve``, as a table: each setting's flag, what it takes and its
help, in the order ``--help`` lists them. ``add_arguments`` adds them to a parser; each
defaults to None (not given), so that ``Settings.read`` can tell a flag given from a
variable or a default.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ratekeeper.service.inflight import DEFAULT_MAX_IN_FLIGHT
from ratekeeper.service.runtime.values import ENVOY_HEADER_NAMES
from ratekeeper.service.waiting import DEFAULT_MAX_WAIT


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: its ``name`` (``--store``), the ``metavar`` of its value (None for a switch,
    which is True when given), its ``help``, and whether it may be ``repeated`` (each value
    added to a list)."""

    name: str
    metavar: str | None
    help: str
    repeated: bool = False


FLAGS = (
    Flag("--store", "URL", "request store (default memory://)"),
    Flag("--config", "URL", "configuration store (default sqlite:///ratekeeper.db)"),
    Flag(
        "--rules",
        "PATH",
        "rule file or directory, repeatable (default: the example rules)",
        repeated=True,
    ),
    Flag("--http", "HOST:PORT", "HTTP address (default 127.0.0.1:8080)"),
    Flag(
        "--grpc",
        "HOST:PORT",
        "gRPC address, or unix:PATH for a Unix socket (default 127.0.0.1:8081)",
    ),
    Flag("--grpc-tls-cert", "FILE", "serve gRPC over TLS with this certificate (PEM, its chain)"),
    Flag("--grpc-tls-key", "FILE", "the private key of --grpc-tls-cert (PEM)"),
    Flag(
        "--grpc-tls-client-ca",
        "FILE",
        "mTLS: require client certificates signed by this CA (PEM)",
    ),
    Flag(
        "--grpc-tls-client-san",
        "NAME",
        "with --grpc-tls-client-ca: the DNS name (or IP address) client certificates must carry",
    ),
    Flag(
        "--admin-token", "TOKEN", "bearer token of the override endpoints (default: they are off)"
    ),
    Flag("--on-store-error", "POLICY", "local (default), allow or deny"),
    Flag(
        "--instances",
        "N",
        "instances sharing the request store (default auto: counted through the store)",
    ),
    Flag("--log-format", "FORMAT", "text (default) or json"),
    Flag("--workers", "N", "worker processes (default 1)"),
    Flag(
        "--server",
        "NAME",
        (
            "uvicorn (default): HTTP on uvicorn, gRPC on grpc.aio at --grpc. pyvoy: both on "
            "--http, in Envoy (pyvoy); for gRPC-heavy traffic: less than half the CPU a gRPC call "
            "(an HTTP check a quarter more); it loses --workers (one process, one event loop), "
            "compressed gRPC messages and grpc.aio's keepalive policy; needs ratekeeper[pyvoy] "
            "(docs/service.md)"
        ),
    ),
    Flag(
        "--max-in-flight",
        "N",
        (
            f"decisions under way at once in each process; past it, requests are answered "
            f"503 overloaded (gRPC UNAVAILABLE) at once (default {DEFAULT_MAX_IN_FLIGHT})"
        ),
    ),
    Flag(
        "--max-wait",
        "SECONDS",
        (
            f"the longest requests should wait for a process: past it, only part of its "
            f"decisions is let in, the rest answered 503 overloaded (gRPC UNAVAILABLE) at once; "
            f"0 lets every one in (default {DEFAULT_MAX_WAIT:g})"
        ),
    ),
    Flag("--ietf-headers", None, "add the IETF RateLimit and RateLimit-Policy fields to answers"),
    Flag(
        "--plan-cache-size",
        "N",
        (
            "limits (plans) each worker caches, about 0.5 KB each, stale ones included "
            "(default 100000)"
        ),
    ),
    Flag(
        "--log-level",
        "LEVEL",
        (
            "debug, info (default), warning or error, for ratekeeper's and uvicorn's loggers; "
            "debug logs every decision"
        ),
    ),
    Flag(
        "--log-keys",
        None,
        (
            "at --log-level debug, each decision's line carries its key (the descriptor's "
            "values: the clients' own data); off by default"
        ),
    ),
    Flag(
        "--log-libraries",
        "NAMES",
        (
            "other libraries' loggers that follow --log-level (grpc,redis,...; all: every "
            "one); by default they log from warning"
        ),
    ),
    Flag(
        "--access-log",
        None,
        "log one line per request: surface, status, time, and the decision's domain and rule",
    ),
    Flag(
        "--shadow-mode",
        None,
        "let every request through: refusals are only logged and counted as shadowed",
    ),
    Flag(
        "--debt",
        None,
        (
            "every hit counts, refused or not, as envoyproxy/ratelimit counts: a count past "
            "its limit is a debt that refuses later hits until time pays it back"
        ),
    ),
    Flag(
        "--envoy-headers",
        None,
        "the gRPC answer carries the rate-limit headers and Retry-After for Envoy to add",
    ),
    Flag(
        "--envoy-header-names",
        "LIMIT,REMAINING,RESET",
        "the names of --envoy-headers (default " + ",".join(ENVOY_HEADER_NAMES) + ")",
    ),
    Flag(
        "--dynamic-metadata",
        None,
        (
            "Envoy's answers (gRPC and POST /json) carry dynamic metadata: the request's "
            "domain, descriptors and hits_addend, and the metadata of the rules that let it "
            "through, as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA"
        ),
    ),
    Flag(
        "--healthcheck-store",
        None,
        (
            "GET /healthcheck answers 500 and gRPC health NOT_SERVING (for ratelimit) while "
            "the request store does not answer, as envoyproxy/ratelimit's "
            "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"
        ),
    ),
    Flag(
        "--healthcheck-rules",
        None,
        (
            "GET /healthcheck answers 500 and gRPC health NOT_SERVING (for ratelimit) while no "
            "rule is loaded, as envoyproxy/ratelimit's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"
        ),
    ),
    Flag(
        "--quota-mode",
        None,
        (
            "every descriptor is in quota mode, as if each rule had quota_mode: true: a "
            "request is refused only when all its limited descriptors are over"
        ),
    ),
    Flag(
        "--compat",
        "MODE",
        (
            "envoy-ratelimit: also read envoyproxy/ratelimit's variables (REDIS_URL, "
            "RUNTIME_ROOT, ...) under these flags; none: do not (default: envoy-ratelimit when "
            "RUNTIME_ROOT is set and no rules are given)"
        ),
    ),
    Flag("--merge-domains", None, "let rule files share a domain: their descriptors join one tree"),
    Flag(
        "--tracing",
        "EXPORTER",
        (
            "off (default), otlp-http or otlp-grpc: one OpenTelemetry span per decision "
            "request, sent to $OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT); needs "
            "ratekeeper[tracing]"
        ),
    ),
    Flag(
        "--trace-sample-rate",
        "RATIO",
        "share of the requests traced when the caller's trace does not decide (default 1)",
    ),
    Flag(
        "--trace-service-name",
        "NAME",
        "the spans' service.name (default $OTEL_SERVICE_NAME, else ratekeeper)",
    ),
    Flag("--trace-service-namespace", "NAME", "the spans' service.namespace (default none)"),
    Flag(
        "--trace-service-instance-id",
        "ID",
        "the spans' service.instance.id (default: a random UUID for each process)",
    ),
    Flag(
        "--statsd",
        "HOST:PORT",
        (
            "send envoyproxy/ratelimit's statistics (ratelimit.service.rate_limit.<domain>."
            "<key>.total_hits, ...) to StatsD over TCP, as the reference does (default: not "
            "sent); needs ratekeeper[statsd]"
        ),
    ),
    Flag(
        "--dogstatsd",
        "HOST:PORT",
        "send them to DogStatsD over UDP, with tags (default: not sent); needs ratekeeper[statsd]",
    ),
    Flag(
        "--dogstatsd-mogrifiers",
        "NAMES",
        "DogStatsD's renamings, each from its DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME, _TAGS",
    ),
    Flag("--stats-tags", "K:V,...", "tags added to every one of these statistics"),
    Flag(
        "--stats-flush-interval",
        "SECONDS",
        "how often they are sent (default 10); also at the stop",
    ),
    Flag(
        "--stats-prometheus",
        "HOST:PORT",
        (
            "serve them to Prometheus on a listener of their own, under the names the "
            "reference's mapper gives (ratelimit_service_rate_limit_total_hits{domain,key1,...}); "
            ":9090 for every address (default: not served)"
        ),
    ),
    Flag("--stats-prometheus-path", "PATH", "the listener's path (default /metrics)"),
    Flag(
        "--stats-prometheus-mapper",
        "FILE",
        "a statsd_exporter mapping file (default: the reference's default_mapper.yaml)",
    ),
    Flag(
        "--near-limit-ratio",
        "RATIO",
        "the share of a limit past which hits count as near_limit (default 0.8)",
    ),
    Flag(
        "--dashboard",
        None,
        (
            "serve a live dashboard at /dashboard, and its figures at /v1/stats and /v1/top, "
            "to the holder of --admin-token"
        ),
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the service's flags (``FLAGS``) to ``parser``; each defaults to None (not given)."""
    for flag in FLAGS:
        if flag.metavar is None:
            parser.add_argument(flag.name, action="store_const", const=True, help=flag.help)
        elif flag.repeated:
            parser.add_argument(flag.name, metavar=flag.metavar, action="append", help=flag.help)
        else:
            parser.add_argument(flag.name, metavar=flag.metavar, help=flag.help)
