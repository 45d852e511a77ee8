"""The decision service's settings: from command-line flags and ``RATEKEEPER_*`` variables.

Each setting has a flag and an environment variable; a flag given wins over the variable, and
the variable over the default:

========================  ============================  =====================================
flag                      variable                      default
========================  ============================  =====================================
``--store URL``           ``RATEKEEPER_STORE``          ``memory://``
``--config URL``          ``RATEKEEPER_CONFIG``         ``sqlite:///ratekeeper.db``
``--rules PATH`` (many)   ``RATEKEEPER_RULES``          the example rules shipped with
                          (paths joined by ``:``)       ratekeeper (``example_rules.yaml``)
``--http HOST:PORT``      ``RATEKEEPER_HTTP``           ``127.0.0.1:8080``
``--grpc HOST:PORT``      ``RATEKEEPER_GRPC``           ``127.0.0.1:8081``; ``unix:PATH``
                                                        listens on a Unix socket instead
(no flag)                 ``RATEKEEPER_LISTEN_HOST``    ``127.0.0.1``: the host of the two
                                                        default addresses above (the image
                                                        sets ``0.0.0.0``); below the others
``--admin-token TOKEN``   ``RATEKEEPER_ADMIN_TOKEN``    none: the admin endpoints are off
``--on-store-error P``    ``RATEKEEPER_ON_STORE_ERROR`` ``local`` (or ``allow``, ``deny``)
``--instances N``         ``RATEKEEPER_INSTANCES``      ``auto``: the processes sharing a
                                                        Redis store count themselves through
                                                        it; N fixes them at N x workers. Under
                                                        ``local`` each process enforces 1/that
                                                        of every limit while the store fails
``--log-format F``        ``RATEKEEPER_LOG_FORMAT``     ``text`` (or ``json``)
``--workers N``           ``RATEKEEPER_WORKERS``        ``1``
``--max-in-flight N``     ``RATEKEEPER_MAX_IN_FLIGHT``  ``1000`` decisions under way at once in
                                                        each process; past it, 503 / UNAVAILABLE
``--max-wait SECONDS``    ``RATEKEEPER_MAX_WAIT``       ``0.1``: while requests wait longer for
                                                        a process, only part of its decisions
                                                        is let in, the rest 503 / UNAVAILABLE;
                                                        ``0`` lets every one in
``--ietf-headers``        ``RATEKEEPER_IETF_HEADERS``   off; adds the IETF ``RateLimit`` and
                          (``true``/``false``, ...)     ``RateLimit-Policy`` fields
========================  ============================  =====================================

========================  ============================  =====================================
``--log-level LEVEL``     ``RATEKEEPER_LOG_LEVEL``      ``info`` (or ``debug``, ``warning``,
                                                        ``error``) for ratekeeper's loggers and
                                                        uvicorn's; ``debug`` logs every decision
``--log-keys``            ``RATEKEEPER_LOG_KEYS``       off; the debug lines of the decisions
                                                        carry the keys (the clients' data)
``--log-libraries``       ``RATEKEEPER_LOG_``           none: other libraries' loggers log from
``NAMES``                 ``LIBRARIES``                 warning; the loggers named (``grpc``,
                                                        ``redis``, ...; ``all``: every one)
                                                        follow ``--log-level``
``--access-log``          ``RATEKEEPER_ACCESS_LOG``     off; one line per request
``--shadow-mode``         ``RATEKEEPER_SHADOW_MODE``    off; every refusal is logged and
                                                        counted, and let through
``--debt``                ``RATEKEEPER_DEBT``           off; every hit counts, refused or not
``--envoy-headers``       ``RATEKEEPER_ENVOY_HEADERS``  off; the gRPC answer carries the
                                                        rate-limit headers for Envoy to add
``--envoy-header-names``  ``RATEKEEPER_ENVOY_HEADER_``  ``X-RateLimit-Limit,X-RateLimit-``
``LIMIT,REMAINING,RESET`` ``NAMES``                     ``Remaining,X-RateLimit-Reset``
``--dynamic-metadata``    ``RATEKEEPER_DYNAMIC_``       off; Envoy's answers carry dynamic
                          ``METADATA``                  metadata: the request and the passing
                                                        rules' ``metadata``
``--quota-mode``          ``RATEKEEPER_QUOTA_MODE``     off; every descriptor in quota mode
``--healthcheck-store``   ``RATEKEEPER_HEALTHCHECK_``   off; ``/healthcheck`` and gRPC health
                          ``STORE``                     fail while the store does not answer
``--healthcheck-rules``   ``RATEKEEPER_HEALTHCHECK_``   off; ``/healthcheck`` and gRPC health
                          ``RULES``                     fail while no rule is loaded
``--dashboard``           ``RATEKEEPER_DASHBOARD``      off; ``/dashboard``, ``/v1/stats`` and
                                                        ``/v1/top``, behind the admin token
                                                        (which it needs)
``--server NAME``         ``RATEKEEPER_SERVER``         ``uvicorn`` (HTTP) and grpc.aio (gRPC);
                                                        or ``pyvoy``: both on one address, in
                                                        Envoy (``service.runtime.pyvoy_app``)
========================  ============================  =====================================

Traces (``--tracing``, ``--trace-*``; ``service.observe.tracing``) and envoyproxy/ratelimit's
statistics (``--statsd``, ``--dogstatsd``, ``--stats-*``, ``--near-limit-ratio``;
``service.observe.stats``) have their flags and defaults in docs/service.md.

``--compat MODE`` (``RATEKEEPER_COMPAT``) reads the settings of Envoy's reference rate-limit
service, envoyproxy/ratelimit, under the flags and ``RATEKEEPER_*`` variables: ``envoy-ratelimit``
reads its environment variables (``REDIS_URL``, ``RUNTIME_ROOT``, ``HOST``, ...) and its runtime
directory, and stops the start on a variable ratekeeper cannot honour (``service.compat``);
``none`` does not; ``envoy-ratelimit`` keeps the overrides in memory (``sqlite://:memory:``)
unless ``--config`` says otherwise, as the reference has no overrides store. Not given, it is
``envoy-ratelimit`` when ``RUNTIME_ROOT`` is set and no ``--rules`` nor ``RATEKEEPER_RULES``
is, else ``none``. ``--merge-domains`` (``RATEKEEPER_MERGE_DOMAINS``, the reference's
``MERGE_DOMAIN_CONFIG``) lets rule files share a domain.

``--grpc-tls-cert FILE`` and ``--grpc-tls-key FILE`` (``RATEKEEPER_GRPC_TLS_CERT``,
``RATEKEEPER_GRPC_TLS_KEY``; PEM files, the one given without the other an error) serve gRPC
over TLS; ``--grpc-tls-client-ca FILE`` (``RATEKEEPER_GRPC_TLS_CLIENT_CA``) makes it mutual:
clients must present a certificate signed by that CA; ``--grpc-tls-client-san NAME``
(``RATEKEEPER_GRPC_TLS_CLIENT_SAN``, with a client CA only) requires that name among the
certificate's SANs (``service.grpc.tls``). The key must match the certificate. None of them,
nor a Unix socket, is served by ``--server pyvoy``; a Unix socket takes one worker only.

``--plan-cache-size N`` (``RATEKEEPER_PLAN_CACHE_SIZE``, default ``100000``) bounds the limits
each worker process caches (its plans, about 0.5 KB each, the stale ones kept for a configuration
store outage included), and so its memory.

``Settings.read(args, environ)`` checks every value and raises ``ConfigError`` listing each bad
one, named by its flag (and its variable when it came from there); ``Settings.sources`` keeps
those names. HTTP and gRPC listening on the same port of one address is an error too.

The flags, with their help, are the table ``flags.FLAGS`` (``add_arguments`` adds them to a
parser); what each value may be, its parser, is in ``values``.
"""

from __future__ import annotations

import argparse
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratekeeper.core.errors import ConfigError
from ratekeeper.core.moved import renamed
from ratekeeper.service.inflight import DEFAULT_MAX_IN_FLIGHT
from ratekeeper.service.runtime.compat_reading import IN_MEMORY_CONFIG, read_compat
from ratekeeper.service.runtime.flags import add_arguments
from ratekeeper.service.runtime.values import (
    ENVOY_HEADER_NAMES,
    PARSERS,
    ListenAddress,
    UnixAddress,
)
from ratekeeper.service.waiting import DEFAULT_MAX_WAIT

__all__ = [
    "EXAMPLE_RULES",
    "IN_MEMORY_CONFIG",
    "ListenAddress",
    "Settings",
    "UnixAddress",
    "add_arguments",
]

EXAMPLE_RULES = str(Path(__file__).parents[1] / "example_rules.yaml")
#: Where HTTP and gRPC listen unless told.
DEFAULT_HTTP, DEFAULT_GRPC = ListenAddress("127.0.0.1", 8080), ListenAddress("127.0.0.1", 8081)


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``ratekeeper serve`` is told; see the module's table."""

    store: str = "memory://"
    config: str = "sqlite:///ratekeeper.db"
    rules: tuple[str, ...] = (EXAMPLE_RULES,)
    http: ListenAddress = DEFAULT_HTTP
    grpc: ListenAddress | UnixAddress = DEFAULT_GRPC
    grpc_tls_cert: str | None = None
    grpc_tls_key: str | None = None
    grpc_tls_client_ca: str | None = None
    grpc_tls_client_san: str | None = None
    admin_token: str | None = field(default=None, repr=False)
    on_store_error: str = "local"
    instances: int | None = None  # None: counted through the store
    log_format: str = "text"
    workers: int = 1
    ietf_headers: bool = False
    plan_cache_size: int = 100_000
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_wait: float = DEFAULT_MAX_WAIT
    log_level: str = "info"
    log_keys: bool = False
    log_libraries: tuple[str, ...] = ()
    access_log: bool = False
    shadow_mode: bool = False
    debt: bool = False
    envoy_headers: bool = False
    envoy_header_names: tuple[str, str, str] = ENVOY_HEADER_NAMES
    dynamic_metadata: bool = False
    quota_mode: bool = False
    healthcheck_store: bool = False
    healthcheck_rules: bool = False
    # -- compatibility with envoyproxy/ratelimit's settings (service.compat) --
    compat: str = "none"
    merge_domains: bool = False
    dashboard: bool = False
    server: str = "uvicorn"
    tracing: str = "off"
    trace_sample_rate: float = 1.0
    trace_service_name: str | None = None  # None: $OTEL_SERVICE_NAME, else ratekeeper
    trace_service_namespace: str = ""
    trace_service_instance_id: str = ""  # empty: a random UUID for each process
    # -- envoyproxy/ratelimit's statistics (service.observe.stats) --
    statsd: ListenAddress | None = None
    dogstatsd: ListenAddress | None = None
    dogstatsd_mogrifiers: tuple[str, ...] = ()
    stats_tags: tuple[tuple[str, str], ...] = ()
    stats_flush_interval: float = 10.0
    stats_prometheus: ListenAddress | None = None
    stats_prometheus_path: str = "/metrics"
    stats_prometheus_mapper: str | None = None
    near_limit_ratio: float = 0.8
    #: ``(logging level, message)`` lines reading the settings gave, for ``serve`` to log.
    notes: tuple[tuple[int, str], ...] = field(default=(), repr=False, compare=False)
    #: Where each setting read came from, as its errors name it (``--http (from $HOST,
    #: $PORT)``); a setting not in it has its default.
    sources: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def read(
        cls, args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """The settings from ``args`` (parsed by a parser given ``add_arguments``; flags not
        given are None) over ``environ`` (default ``os.environ``) over the defaults."""
        given = vars(args) if args is not None else {}
        env = os.environ if environ is None else environ
        errors: list[str] = []
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        translated = read_compat(given, env, values, errors)
        for name, parse in PARSERS.items():
            flag = "--" + name.replace("_", "-")
            variable = "RATEKEEPER_" + name.upper()
            raw: Any = given.get(name)
            where = flag
            if raw is None and variable in env and (env[variable] or name not in _URLS):
                raw = env[variable]
                if name == "rules":
                    raw = [path for path in raw.split(os.pathsep) if path]
                where = f"{flag} (from ${variable})"
            if raw is None and name in translated:
                raw, source = translated[name]
                where = f"{flag} (from {source})"
            if raw is None and name in _LISTENING and env.get(LISTEN_HOST):
                raw = _on_host(env[LISTEN_HOST], _LISTENING[name])
                where = f"{flag} (from ${LISTEN_HOST})"
            if raw is None:
                continue
            try:
                values[name] = parse(raw)
            except ValueError as error:
                errors.append(f"{where}: {error}")
            sources[name] = where
        settings = cls(**values, sources=sources)
        errors.extend(_grpc_errors(settings, failed=set(sources) - set(values)))
        if _overlap(settings.http, settings.grpc):
            errors.append(
                f"{settings.sources.get('http', '--http')} and "
                f"{settings.sources.get('grpc', '--grpc')}: HTTP ({settings.http}) and gRPC "
                f"({settings.grpc}) need ports of their own"
            )
        _check_stats(settings, env, errors)
        if settings.workers > 1 and settings.store.startswith("memory:"):
            errors.append(
                "--workers: more than one worker needs a shared store such as redis://; "
                "with memory:// each worker would count alone"
            )
        if settings.server == "pyvoy" and settings.workers > 1:
            errors.append(
                f"{settings.sources.get('workers', '--workers')}: --server pyvoy runs one "
                "process with one event loop; more workers need --server uvicorn"
            )
        if settings.dashboard and "admin_token" not in sources:
            errors.append(
                f"{settings.sources.get('dashboard', '--dashboard')}: the dashboard needs "
                "--admin-token (or RATEKEEPER_ADMIN_TOKEN): it shows the clients' keys, "
                "often personal data, and only to whoever holds the token"
            )
        if errors:
            raise ConfigError(errors)
        return settings


#: The host HTTP and gRPC listen on, at their default ports, when no flag, ``RATEKEEPER_*``
#: variable nor the reference's variables name their address: a container image sets it to
#: ``0.0.0.0`` so that it is reachable from outside, and ``HOST``/``PORT`` still work.
LISTEN_HOST = "RATEKEEPER_LISTEN_HOST"
_LISTENING = {"http": DEFAULT_HTTP, "grpc": DEFAULT_GRPC}


def _on_host(host: str, default: ListenAddress) -> str:
    """``host`` at ``default``'s port, as ``--http`` takes it (an IPv6 host in brackets)."""
    return str(ListenAddress(host, default.port))


#: The settings that take a URL: their variable set but empty counts as unset (no URL is
#: empty), as ``ratekeeper limits`` reads ``RATEKEEPER_CONFIG``.
_URLS = frozenset({"store", "config"})

_WILDCARDS = ("0.0.0.0", "::")


def _overlap(one: ListenAddress, other: ListenAddress | UnixAddress) -> bool:
    """Whether two listeners would need the same port of the same address."""
    return (
        isinstance(other, ListenAddress)
        and one.port == other.port
        and (one.host == other.host or one.host in _WILDCARDS or other.host in _WILDCARDS)
    )


def _grpc_errors(settings: Settings, failed: set[str]) -> list[str]:
    """What is wrong with gRPC's listener as a whole: its TLS files apart or not matching, a
    Unix socket shared by workers (each would replace the last one's), what pyvoy does not
    serve; nothing more once one of its settings has ``failed`` to parse."""
    if failed & {"grpc", "grpc_tls_cert", "grpc_tls_key", "grpc_tls_client_ca"}:
        return []
    names = settings.sources
    cert, key = settings.grpc_tls_cert, settings.grpc_tls_key
    ca, san = settings.grpc_tls_client_ca, settings.grpc_tls_client_san
    errors = []
    if (cert is None) != (key is None):
        given, missing = (
            ("grpc_tls_cert", "--grpc-tls-key")
            if key is None
            else ("grpc_tls_key", "--grpc-tls-cert")
        )
        errors.append(f"{names[given]}: TLS needs {missing} too")
    elif cert is not None and key is not None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as error:
            errors.append(
                f"{names['grpc_tls_cert']} and {names['grpc_tls_key']}: not a certificate and "
                f"its private key ({error.args[-1]})"
            )
    if ca is not None:
        if cert is None:
            errors.append(f"{names['grpc_tls_client_ca']}: mTLS needs --grpc-tls-cert and -key")
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(ca)
        except (ssl.SSLError, OSError) as error:
            errors.append(f"{names['grpc_tls_client_ca']}: no CA certificate ({error.args[-1]})")
    if san is not None and ca is None:
        errors.append(
            f"{names['grpc_tls_client_san']}: a client SAN is checked on client certificates, "
            "which only --grpc-tls-client-ca asks for"
        )
    unix = isinstance(settings.grpc, UnixAddress)
    if unix and settings.workers > 1:
        errors.append(
            f"{names['grpc']}: a Unix socket has one listener, and each worker would take it "
            f"from the last; more workers need a TCP HOST:PORT"
        )
    if settings.server == "pyvoy":
        pyvoy = "--server pyvoy serves gRPC in plaintext on the HTTP address (h2c)"
        if unix:
            errors.append(f"{names['grpc']}: {pyvoy}; a Unix socket needs --server uvicorn")
        if cert is not None:
            errors.append(f"{names['grpc_tls_cert']}: {pyvoy}; TLS needs --server uvicorn")
    return errors


def _check_stats(settings: Settings, env: Mapping[str, str], errors: list[str]) -> None:
    """The Prometheus listener of the statistics needs a port of its own; the mogrifiers
    their variables."""
    listener = settings.stats_prometheus
    for other, name in ((settings.http, "http"), (settings.grpc, "grpc")):
        if listener is not None and _overlap(listener, other):
            errors.append(
                f"{settings.sources.get('stats_prometheus', '--stats-prometheus')}: the "
                f"statistics' listener ({listener}) needs a port other than --{name}'s ({other})"
            )
    if settings.dogstatsd_mogrifiers:
        from ratekeeper.service.observe.stats.sinks import mogrifiers

        try:
            mogrifiers(settings.dogstatsd_mogrifiers, env)
        except ValueError as error:
            where = settings.sources.get("dogstatsd_mogrifiers", "--dogstatsd-mogrifiers")
            errors.append(f"{where}: {error}")


#: The old names of names here, found with a ``DeprecationWarning`` until 0.3.0.
_RENAMED = {"Address": "ListenAddress"}


def __getattr__(name: str) -> Any:
    """An old name (``Address``): its new one's object, with a warning."""
    return renamed(__name__, name, _RENAMED, globals())
