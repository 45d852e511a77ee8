"""``ratekeeper serve``: the decision service built from its settings, and run.

``build_engine(settings)`` opens the request store (with the failure policy
``on_store_error`` for a remote store), the configuration store and the rule files.
``create_app(engine, ...)`` wires the service over it: the HTTP app (``service.http``), the
dashboard's routes beside its own, and its lifespan, which starts the engine, runs the gRPC
server and the tasks of every second (the dashboard's, the workers' metrics), and stops them.
``serve(settings)`` logs where it listens, which stores it opened (passwords masked) and how
many rules it loaded from which files, then serves HTTP with uvicorn until SIGTERM or SIGINT:
it stops accepting, finishes the requests in flight, closes the engine, and returns 0 (SIGINT
ends as an interrupt). With ``workers`` above 1, each worker process builds its own engine from
the same settings (``from_environment``), and their gRPC servers share the port. An address
something else listens on, or no address of this machine, is refused before anything listens
(exit 3, one line naming the address and the flag or variable it came from), HTTP's and
gRPC's alike.

The workers write their metrics into a directory made for the run (``PROMETHEUS_MULTIPROC_DIR``,
removed at exit), so that every scrape of ``/metrics`` reports the totals of them all (see
``ratekeeper.service.observe.multiprocess``).

Starlette and uvicorn are the ``server`` extra, imported here only when serving: without them,
``MissingExtraError`` names the extra to install.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, NamedTuple

from ratekeeper.core.errors import ConfigStoreError, MissingExtraError
from ratekeeper.core.redaction import redacted
from ratekeeper.core.wording import many
from ratekeeper.service.observe.logs import ACCESS, configure_logging, worker_number
from ratekeeper.service.runtime.settings import IN_MEMORY_CONFIG, Address, Settings

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ratekeeper.engine import AsyncEngine
    from ratekeeper.rules import RuleSet
    from ratekeeper.service.admission import Admission
    from ratekeeper.service.dashboard import Dashboard
    from ratekeeper.service.observe.access import AccessLog
    from ratekeeper.service.observe.metrics import Metrics

log = logging.getLogger("ratekeeper.service")

#: Seconds the service waits for requests in flight once told to stop.
GRACE = 30
#: Seconds the gRPC server gives its calls in flight when the service stops.
GRPC_GRACE = 10.0


def require_server_extra() -> None:
    """Raise ``MissingExtraError`` unless starlette and uvicorn are installed."""
    for package in ("starlette", "uvicorn"):
        try:
            __import__(package)
        except ImportError:
            raise MissingExtraError(package, "server") from None


def build_engine(settings: Settings) -> AsyncEngine:
    """The engine ``settings`` describe: request store, configuration store and rules."""
    from ratekeeper.engine import AsyncEngine
    from ratekeeper.stores import open_async_store

    remote = not settings.store.startswith("memory:")
    options: dict[str, Any] = (
        {
            "on_store_error": settings.on_store_error,
            # each worker is a process holding its own share under the "local" policy
            "instances": settings.instances * settings.workers,
        }
        if remote
        else {}
    )
    store = open_async_store(settings.store, **options)
    return AsyncEngine(
        store,
        rules=list(settings.rules),
        config=settings.config,
        cache_size=settings.plan_cache_size,
        shadow=settings.shadow_mode,
        merge_domains=settings.merge_domains,
        debt=settings.debt,
    )


def create_app(
    engine: AsyncEngine,
    *,
    admin_token: str | None = None,
    ietf_headers: bool = False,
    close_engine: bool = False,
    metrics: Metrics | None = None,
    grpc_address: str | None = None,
    admission: Admission | None = None,
    envoy_headers: tuple[str, str, str] | None = None,
    access_log: AccessLog | None = None,
    dashboard: Dashboard | None = None,
) -> Starlette:
    """The service's app over ``engine``: the HTTP app (``ratekeeper.service.http``), with
    what runs beside it wired in. ``admin_token`` turns the override endpoints on;
    ``ietf_headers`` adds ``RateLimit`` and ``RateLimit-Policy``; ``close_engine`` closes the
    engine when the app shuts down. ``metrics`` (tracking ``engine``) is served at
    ``/metrics``. With ``grpc_address``, Envoy's gRPC rate-limit service runs beside it on the
    same event loop, from startup to shutdown. ``admission`` bounds the decisions in flight,
    over HTTP and gRPC (``metrics`` then count those shed). ``envoy_headers`` (the names of
    the limit, remaining and reset headers) puts the rate-limit headers in Envoy's answers,
    over gRPC and ``POST /json`` (``response_headers_to_add``). ``access_log`` (over
    ``engine``) logs every decision request, over HTTP and gRPC. ``dashboard`` (over
    ``engine``) serves ``/dashboard``, ``/v1/stats`` and ``/v1/top``, and records every second
    from startup to shutdown."""
    from ratekeeper.service.http.app import http_app

    if metrics is not None and admission is not None:
        metrics.admission = admission
    lifespan = _lifespan(
        engine,
        close_engine=close_engine,
        metrics=metrics,
        grpc_address=grpc_address,
        admission=admission,
        envoy_headers=envoy_headers,
        access_log=access_log,
        dashboard=dashboard,
    )
    return http_app(
        engine,
        admin_token=admin_token,
        ietf_headers=ietf_headers,
        metrics=metrics,
        admission=admission,
        envoy_headers=envoy_headers,
        access_log=access_log,
        routes=() if dashboard is None else dashboard.routes(),
        lifespan=lifespan,
    )


def _lifespan(
    engine: AsyncEngine,
    *,
    close_engine: bool,
    metrics: Metrics | None,
    grpc_address: str | None,
    admission: Admission | None,
    envoy_headers: tuple[str, str, str] | None,
    access_log: AccessLog | None,
    dashboard: Dashboard | None,
) -> Callable[[object], AbstractAsyncContextManager[None]]:
    """What the app of ``create_app`` runs from its startup to its shutdown: the engine
    started; the gRPC server on ``grpc_address``, if given; with many workers, this one's
    metrics published every second; the dashboard's recording. At shutdown, the gRPC server
    stopped (its calls in flight given ``GRPC_GRACE`` seconds), the tasks cancelled, the
    metrics' last figures published, and the engine closed if ``close_engine``."""

    @asynccontextmanager
    async def lifespan(app: object) -> AsyncIterator[None]:
        await asyncio.to_thread(engine.start)
        server = None
        if grpc_address is not None:
            from ratekeeper.service.grpc.servicer import serve_grpc

            server, _ = await serve_grpc(
                engine,
                grpc_address,
                metrics,
                admission,
                header_names=envoy_headers,
                access_log=access_log,
            )
        tasks = []
        if metrics is not None and metrics.multiprocess:
            # with many workers, this one's figures written every second
            tasks.append(asyncio.create_task(metrics.publish_every()))
        if dashboard is not None:
            tasks.append(asyncio.create_task(dashboard.run()))
        try:
            yield
        finally:
            if server is not None:
                await server.stop(GRPC_GRACE)
            for task in tasks:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
            if metrics is not None:
                metrics.close()  # with many workers: the last figures, the gauges dropped
            if close_engine:
                await engine.close()

    return lifespan


def build_app(settings: Settings) -> Starlette:
    """The HTTP app of ``settings``, which closes its engine when it shuts down and runs the
    gRPC server (grpc.aio) from its startup to its shutdown."""
    return build_parts(settings, grpc_aio=True).http


class Parts(NamedTuple):
    """The service's parts over one engine: the HTTP app (its lifespan starts and closes the
    engine), and what a gRPC surface beside it shares with it."""

    http: Starlette
    engine: AsyncEngine
    metrics: Metrics
    admission: Admission
    access_log: AccessLog | None


def build_parts(settings: Settings, *, grpc_aio: bool) -> Parts:
    """The service of ``settings``: the HTTP app, which also runs grpc.aio on ``settings.grpc``
    if ``grpc_aio``, and the parts a gRPC app beside it needs
    (``ratekeeper.service.runtime.pyvoy_app``)."""
    require_server_extra()
    engine = build_engine(settings)
    rules = engine.rules
    domains = len(rules.domains)
    log.info(
        "loaded %s in %s from %s",
        many(len(rules), "rule"),
        many(domains, "domain"),
        ", ".join(rules.sources) or "no files",
    )
    if not rules:
        log.warning(
            "no rules loaded from %s: every request is allowed until rules are added",
            ", ".join(settings.rules),
        )
    if settings.debt:
        _say_leases_exact(rules)
    names: dict[str, list[str]] = {}
    for rule in rules:
        names.setdefault(rule.domain, []).append(rule.name or rule.path)
    for domain, named in names.items():
        log.debug("rules of domain %s: %s", domain, ", ".join(named))
    log.info("request store: %s", redacted(settings.store))
    log.info("configuration store: %s%s", redacted(settings.config), _kept(settings.config))
    if settings.admin_token is None:
        log.info("admin endpoints: off (no admin token)")
    from ratekeeper.service.admission import Admission
    from ratekeeper.service.observe.metrics import Metrics

    metrics = Metrics(multiprocess=settings.workers > 1)  # the workers' totals, shared
    metrics.track(engine)
    dashboard = _dashboard(engine, metrics, settings)
    _decision_log(engine, settings)
    access_log = _access_log(engine, settings)
    admission = Admission(settings.max_in_flight)
    http = create_app(
        engine,
        admin_token=settings.admin_token,
        ietf_headers=settings.ietf_headers,
        close_engine=True,
        metrics=metrics,
        grpc_address=str(settings.grpc) if grpc_aio else None,
        admission=admission,
        envoy_headers=envoy_header_names(settings),
        access_log=access_log,
        dashboard=dashboard,
    )
    return Parts(http, engine, metrics, admission, access_log)


def _say_leases_exact(rules: RuleSet) -> None:
    """Warn that ``--debt`` decides the leased rules of ``rules`` exactly: a debt is counted in
    the store, and cannot be granted from a slice (``ratekeeper.core.limits.with_debt``)."""
    leased = [
        f"{rule.domain}/{rule.name or rule.path}"
        for rule in rules
        if rule.limit is not None and rule.limit.sync == "leased"
    ]
    if leased:
        log.warning(
            "--debt counts every hit in the store, so %s decided exactly, not leased: %s",
            "this rule is" if len(leased) == 1 else "these rules are",
            ", ".join(leased),
        )


def _kept(config: str) -> str:
    """What the ``configuration store:`` line adds for ``config``: how long an in-memory store
    keeps the overrides (``--compat envoy-ratelimit`` chooses one, as the reference keeps
    none), or the run's own, which the workers share in its place (``run_config``)."""
    where = " (or RATEKEEPER_CONFIG) sqlite:///PATH or postgresql://... keeps them"
    if config == IN_MEMORY_CONFIG:
        return f", in memory: the overrides last until this process stops; --config{where}"
    run = os.environ.get("PROMETHEUS_MULTIPROC_DIR")  # the run's directory, with workers
    if run and config == run_config(run):
        return (
            ", this run's: the workers share the overrides, which last until the service "
            f"stops; --config{where}"
        )
    return ""


def run_config(directory: str) -> str:
    """The configuration store the workers of one run share where an in-memory one was asked
    for (each worker's memory would hold overrides of its own, and an override set through one
    worker would reach no other): a SQLite file in the run's ``directory``, removed with it
    when the service stops."""
    return f"sqlite:///{os.path.join(directory, 'overrides.db')}"


def envoy_header_names(settings: Settings) -> tuple[str, str, str] | None:
    """The names of the rate-limit headers Envoy's answers carry; None for none."""
    return settings.envoy_header_names if settings.envoy_headers else None


def _dashboard(engine: AsyncEngine, metrics: Metrics, settings: Settings) -> Dashboard | None:
    """The dashboard ``settings`` ask for, recording beside ``metrics`` (and, with many
    workers, sharing each one's record in the directory of their metrics files)."""
    if not settings.dashboard or settings.admin_token is None:
        return None
    from ratekeeper.service.dashboard import Dashboard, Recorder, SharedShots
    from ratekeeper.service.observe.multiprocess import directory

    shared = SharedShots(directory()) if settings.workers > 1 else None
    return Dashboard(
        engine, metrics, Recorder(engine, metrics), settings.admin_token, shared=shared
    )


def _decision_log(engine: AsyncEngine, settings: Settings) -> None:
    """The decision log, when its logger is enabled for debug (``--log-level debug``): one
    line per descriptor decided, with its key if ``settings.log_keys``."""
    from ratekeeper.service.observe import decision_log

    if not decision_log.wanted():
        if settings.log_keys:
            log.warning("--log-keys: no decision is logged below --log-level debug")
        return
    decision_log.DecisionLog(engine, keys=settings.log_keys)
    log.info(
        "decision log: on (logger %s, debug), one line per descriptor%s",
        decision_log.log.name,
        ", with its key (--log-keys)" if settings.log_keys else "",
    )


def _access_log(engine: AsyncEngine, settings: Settings) -> AccessLog | None:
    """The access log ``settings`` ask for, made once the engine has its other observer (the
    metrics)."""
    if not settings.access_log:
        return None
    from ratekeeper.service.observe.access import AccessLog

    log.info("access log: on (logger %s)", ACCESS)
    return AccessLog(engine)


def from_environment() -> Starlette:
    """A worker's app, from the ``RATEKEEPER_*`` variables ``serve`` set (uvicorn's factory)."""
    settings = Settings.read(None)
    worker = worker_number() if settings.workers > 1 else None
    configure_logging(
        settings.log_format, settings.log_level, libraries=settings.log_libraries, worker=worker
    )
    return build_app(settings)


def _environment(settings: Settings) -> dict[str, str]:
    values = {
        "STORE": settings.store,
        "CONFIG": settings.config,
        "RULES": os.pathsep.join(settings.rules),
        "HTTP": str(settings.http),
        "GRPC": str(settings.grpc),
        "ADMIN_TOKEN": settings.admin_token or "",
        "ON_STORE_ERROR": settings.on_store_error,
        "INSTANCES": str(settings.instances),
        "LOG_FORMAT": settings.log_format,
        "WORKERS": str(settings.workers),
        "IETF_HEADERS": _flag(settings.ietf_headers),
        "PLAN_CACHE_SIZE": str(settings.plan_cache_size),
        "MAX_IN_FLIGHT": str(settings.max_in_flight),
        "LOG_LEVEL": settings.log_level,
        "LOG_KEYS": _flag(settings.log_keys),
        "LOG_LIBRARIES": ",".join(settings.log_libraries),
        "ACCESS_LOG": _flag(settings.access_log),
        "SHADOW_MODE": _flag(settings.shadow_mode),
        "DEBT": _flag(settings.debt),
        "ENVOY_HEADERS": _flag(settings.envoy_headers),
        "ENVOY_HEADER_NAMES": ",".join(settings.envoy_header_names),
        # what --compat read is in the variables above: the workers do not read it again
        "COMPAT": "none",
        "MERGE_DOMAINS": _flag(settings.merge_domains),
        "DASHBOARD": _flag(settings.dashboard),
        "SERVER": settings.server,
    }
    return {f"RATEKEEPER_{name}": value for name, value in values.items()}


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _say_dashboard(settings: Settings) -> None:
    if settings.dashboard:
        log.info("dashboard: http://%s/dashboard (sign in with the admin token)", settings.http)


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


def _unlistenable(address: Address, reuse: bool = False) -> str | None:
    """Why nothing can listen on ``address`` now (another process does, or the host is no
    address of this machine, say); None if it can. ``reuse`` binds as uvicorn does
    (SO_REUSEADDR: a port whose last connections are closing is free).

    gRPC's own servers share a port (SO_REUSEPORT, as the workers of one service do), so a
    second service would quietly take half of the first one's calls: it is refused here.
    """
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    try:
        with socket.socket(family) as probe:
            if reuse:
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


def serve(settings: Settings) -> int:
    """Serve HTTP as ``settings`` say until told to stop; 0 after a graceful stop."""
    require_server_extra()
    pyvoy = settings.server == "pyvoy"
    if pyvoy:
        from ratekeeper.service.runtime import pyvoy_server

        pyvoy_server.require_pyvoy()
    configure_logging(settings.log_format, settings.log_level, libraries=settings.log_libraries)
    for level, message in settings.notes:  # what reading the settings had to say
        log.log(level, message)
    if settings.shadow_mode:
        log.warning("shadow mode: every refusal is let through, counted as shadowed")
    refused = _unlistenable(settings.http, reuse=True)
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

    common = uvicorn_options(settings)
    if settings.workers > 1:
        from ratekeeper.service.observe.multiprocess import shared_directory

        os.environ.update(_environment(settings))
        log.info("listening on http://%s with %s", settings.http, many(settings.workers, "worker"))
        _say_dashboard(settings)
        with shared_directory() as run:  # the workers' metrics files, for this run only
            if settings.config == IN_MEMORY_CONFIG:
                os.environ["RATEKEEPER_CONFIG"] = run_config(run)
            uvicorn.run(
                "ratekeeper.service.runtime.app:from_environment",
                factory=True,
                workers=settings.workers,
                **common,
            )
        log.info("stopped")
        return 0
    app = build_app(settings)
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
