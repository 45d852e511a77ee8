"""``ratekeeper serve``: the decision service built from its settings (``app``), and run.

``serve(settings)`` logs where it listens, which stores it opened (passwords masked) and how
many rules it loaded from which files, then serves HTTP with uvicorn until SIGTERM or SIGINT:
it stops accepting, finishes the requests in flight, closes the engine, and returns 0 (SIGINT
ends as an interrupt). With ``workers`` above 1, each worker process builds its own engine from
the same settings (``app.from_environment``), and their gRPC servers share the port. An
address something else listens on, or no address of this machine, is refused before anything
listens (exit 3, one line naming the address and the flag or variable it came from), HTTP's
and gRPC's alike. uvicorn runs on ``runtime.loop``'s event loop, which accepts every waiting
connection at once, with ``runtime.protocol``'s HTTP protocol, which answers at the door while
the process sheds. With ``--server pyvoy`` the service runs in Envoy (``pyvoy_server``).

The workers write their metrics into a directory made for the run (``PROMETHEUS_MULTIPROC_DIR``,
removed at exit), so that every scrape of ``/metrics`` reports the totals of them all (see
``ratekeeper.service.observe.multiprocess``).

Starlette and uvicorn are the ``server`` extra, imported here only when serving: without them,
``MissingExtraError`` names the extra to install.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from typing import Any

from ratekeeper.core.errors import ConfigStoreError
from ratekeeper.core.wording import many
from ratekeeper.service.observe.logs import configure_logging
from ratekeeper.service.runtime import collector
from ratekeeper.service.runtime.app import (
    build_app,
    require_server_extra,
    run_config,
    shed_first_protocol,
)
from ratekeeper.service.runtime.settings import (
    IN_MEMORY_CONFIG,
    ListenAddress,
    Settings,
    UnixAddress,
)
from ratekeeper.service.runtime.stats import require_stats_extra, workers_exporter

log = logging.getLogger("ratekeeper.service")

#: Seconds the service waits for requests in flight once told to stop.
GRACE = 30


def _environment(settings: Settings) -> dict[str, str]:
    values = {
        "STORE": settings.store,
        "CONFIG": settings.config,
        "RULES": os.pathsep.join(settings.rules),
        "HTTP": str(settings.http),
        "GRPC": str(settings.grpc),
        "GRPC_TLS_CERT": settings.grpc_tls_cert or "",
        "GRPC_TLS_KEY": settings.grpc_tls_key or "",
        "GRPC_TLS_CLIENT_CA": settings.grpc_tls_client_ca or "",
        "GRPC_TLS_CLIENT_SAN": settings.grpc_tls_client_san or "",
        "ADMIN_TOKEN": settings.admin_token or "",
        "ON_STORE_ERROR": settings.on_store_error,
        "INSTANCES": "auto" if settings.instances is None else str(settings.instances),
        "LOG_FORMAT": settings.log_format,
        "WORKERS": str(settings.workers),
        "IETF_HEADERS": _flag(settings.ietf_headers),
        "PLAN_CACHE_SIZE": str(settings.plan_cache_size),
        "MAX_IN_FLIGHT": str(settings.max_in_flight),
        "MAX_WAIT": repr(settings.max_wait),
        "LOG_LEVEL": settings.log_level,
        "LOG_KEYS": _flag(settings.log_keys),
        "LOG_LIBRARIES": ",".join(settings.log_libraries),
        "ACCESS_LOG": _flag(settings.access_log),
        "SHADOW_MODE": _flag(settings.shadow_mode),
        "DEBT": _flag(settings.debt),
        "ENVOY_HEADERS": _flag(settings.envoy_headers),
        "ENVOY_HEADER_NAMES": ",".join(settings.envoy_header_names),
        "DYNAMIC_METADATA": _flag(settings.dynamic_metadata),
        "QUOTA_MODE": _flag(settings.quota_mode),
        "HEALTHCHECK_STORE": _flag(settings.healthcheck_store),
        "HEALTHCHECK_RULES": _flag(settings.healthcheck_rules),
        # what --compat read is in the variables above: the workers do not read it again
        "COMPAT": "none",
        "MERGE_DOMAINS": _flag(settings.merge_domains),
        "DASHBOARD": _flag(settings.dashboard),
        "SERVER": settings.server,
        "TRACING": settings.tracing,
        "TRACE_SAMPLE_RATE": repr(settings.trace_sample_rate),
        "TRACE_SERVICE_NAME": settings.trace_service_name or "",
        "TRACE_SERVICE_NAMESPACE": settings.trace_service_namespace,
        "TRACE_SERVICE_INSTANCE_ID": settings.trace_service_instance_id,
        "STATSD": _optional(settings.statsd),
        "DOGSTATSD": _optional(settings.dogstatsd),
        "DOGSTATSD_MOGRIFIERS": ",".join(settings.dogstatsd_mogrifiers),
        "STATS_TAGS": ",".join(f"{key}:{value}" for key, value in settings.stats_tags),
        "STATS_FLUSH_INTERVAL": repr(settings.stats_flush_interval),
        "STATS_PROMETHEUS": _optional(settings.stats_prometheus),
        "STATS_PROMETHEUS_PATH": settings.stats_prometheus_path,
        "STATS_PROMETHEUS_MAPPER": settings.stats_prometheus_mapper or "",
        "NEAR_LIMIT_RATIO": repr(settings.near_limit_ratio),
    }
    return {f"RATEKEEPER_{name}": value for name, value in values.items()}


def _optional(address: ListenAddress | None) -> str:
    return "" if address is None else str(address)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _say_dashboard(settings: Settings) -> None:
    if settings.dashboard:
        log.info("dashboard: http://%s/dashboard (sign in with the admin token)", settings.http)


def _say_tracing_off(settings: Settings) -> None:
    """Warn of tracing settings given while tracing is off: they do nothing."""
    given = [where for name, where in settings.sources.items() if name.startswith("trace_")]
    if settings.tracing == "off" and given:
        log.warning(
            "%s: not used: tracing is off (--tracing otlp-http or otlp-grpc)", ", ".join(given)
        )


def _stop(server: Any) -> None:
    """Have the uvicorn ``server`` stop: at once if it runs, else right after it starts."""
    server.should_exit = True


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The options ``serve`` runs uvicorn with (``python -m benchmarks --service`` runs its
    baseline with the same): the event loop and HTTP parser are uvicorn's ``auto``, uvloop
    and httptools when installed (the ``server`` extra installs them)."""
    return {
        "host": settings.http.host,
        "port": settings.http.port,
        "log_config": None,
        "access_log": False,
        "lifespan": "on",
        "timeout_graceful_shutdown": GRACE,
        "server_header": False,
    }


def _unlistenable(address: ListenAddress | UnixAddress) -> str | None:
    """Why nothing can listen on ``address`` now (another process does, or the host is no
    address of this machine, say); None if it can. It binds as uvicorn and gRPC do, with
    SO_REUSEADDR: a port whose last connections are closing (``TIME_WAIT``, as a service
    restarted in place leaves them) is free; one another socket listens on is not.

    gRPC's own servers share a port (SO_REUSEPORT, as the workers of one service do), so a
    second service would quietly take half of the first one's calls: it is refused here. On a
    Unix socket grpc replaces the file, so a second service would take all of them: a socket
    something answers on is refused too (a stale one is replaced).
    """
    if isinstance(address, UnixAddress):
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(address.path)
            except FileNotFoundError:
                return None
            except OSError:  # nothing listens: a stale socket, which grpc replaces
                return None
        return "another process listens on this socket"
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    try:
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((address.host, address.port))
    except OSError as error:
        return error.strerror or str(error)
    return None


def _unopenable(config: str) -> str | None:
    """Why the SQLite configuration store ``config`` names cannot be opened (a directory that
    does not exist, a file that cannot be written); None if it can, or if it is not SQLite.

    A local file that cannot be opened is no outage to wait out: a service started with it
    would ignore every override for ever. A PostgreSQL store is not checked: the service may
    start while it is down, deciding by the rules, and follows it once it is back.
    """
    if not config.lower().startswith("sqlite:"):
        return None
    from ratekeeper.config import open_config_store

    store = open_config_store(config)
    try:
        store.get("ratekeeper:startup")  # opens the file, creating it and its table if need be
    except ConfigStoreError as error:
        return str(error)
    finally:
        store.close()
    return None


def _serve_workers(settings: Settings, options: dict[str, Any]) -> int:
    """Serve with ``settings.workers`` uvicorn worker processes, each building its app from
    the environment (``app.from_environment``), with uvicorn ``options``."""
    import uvicorn

    from ratekeeper.service.observe.multiprocess import shared_directory

    os.environ.update(_environment(settings))
    log.info("listening on http://%s with %s", settings.http, many(settings.workers, "worker"))
    _say_dashboard(settings)
    with (
        shared_directory() as run,  # the workers' metrics files, for this run only
        workers_exporter(settings, run),  # their envoyproxy/ratelimit statistics, added up
    ):
        if settings.config == IN_MEMORY_CONFIG:
            os.environ["RATEKEEPER_CONFIG"] = run_config(run)
        uvicorn.run(
            "ratekeeper.service.runtime.app:from_environment",
            factory=True,
            workers=settings.workers,
            **options,
        )
    log.info("stopped")
    return 0


def serve(settings: Settings) -> int:
    """Serve HTTP as ``settings`` say until told to stop; 0 after a graceful stop."""
    require_server_extra()
    if settings.tracing != "off":
        from ratekeeper.service.observe import tracing

        tracing.require()
    pyvoy = settings.server == "pyvoy"
    if pyvoy:
        from ratekeeper.service.runtime import pyvoy_server

        pyvoy_server.require_pyvoy()
    require_stats_extra(settings)
    configure_logging(settings.log_format, settings.log_level, libraries=settings.log_libraries)
    for level, message in settings.notes:  # what reading the settings had to say
        log.log(level, message)
    if settings.shadow_mode:
        log.warning("shadow mode: every refusal is let through, counted as shadowed")
    _say_tracing_off(settings)
    refused = _unlistenable(settings.http)
    if refused is not None:
        where = settings.sources.get("http", "--http, by default")
        log.error("could not listen on HTTP %s (%s): %s", settings.http, where, refused)
        return 3
    if pyvoy and "grpc" in settings.sources:
        log.warning(
            "%s is not used with --server pyvoy: gRPC is served on the HTTP address %s",
            settings.sources["grpc"],
            settings.http,
        )
    refused = None if pyvoy else _unlistenable(settings.grpc)
    if refused is not None:  # else gRPC's SO_REUSEPORT would share it with its holder
        where = settings.sources.get("grpc", "--grpc, by default")
        log.error("could not listen on gRPC %s (%s): %s", settings.grpc, where, refused)
        return 3
    unopenable = _unopenable(settings.config)
    if unopenable is not None:
        log.error(
            "could not open the configuration store: %s (--config sqlite://:memory: keeps "
            "the overrides in this process only)",
            unopenable,
        )
        return 3
    if pyvoy:
        from ratekeeper.rules import load_rules

        load_rules(list(settings.rules), merge_domains=settings.merge_domains)  # errors: here
        return pyvoy_server.run(settings, _environment(settings), GRACE)
    import uvicorn

    common = {
        **uvicorn_options(settings),
        # every waiting connection accepted at once, under load too (runtime.loop), and a
        # request answered at the door while the process sheds (runtime.protocol)
        "loop": "ratekeeper.service.runtime.loop:new_event_loop",
        "http": shed_first_protocol() or "auto",
    }
    if settings.workers > 1:
        return _serve_workers(settings, common)
    app = build_app(settings)
    collector.tune(settings.server)
    server = uvicorn.Server(uvicorn.Config(app, **common))
    # Until uvicorn takes the signals, a SIGTERM asks the server to stop as soon as it has
    # started; once it has shut down, uvicorn raises the signal that stopped it again, which is
    # then answered here, so that a graceful stop exits 0.
    previous = signal.signal(signal.SIGTERM, lambda number, frame: _stop(server))
    try:
        log.info("listening on http://%s", settings.http)
        _say_dashboard(settings)
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:
        log.error("could not listen on http://%s", settings.http)
        return 3
    log.info("stopped")
    return 0
