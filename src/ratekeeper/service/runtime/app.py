"""The decision service's app, built from its settings and wired over one engine.

``build_engine(settings)`` opens the request store (with the failure policy
``on_store_error`` for a remote store), the configuration store and the rule files.
``create_app(engine, ...)`` wires the service over it: the HTTP app (``service.http``), the
dashboard's routes beside its own, and its lifespan (``lifespan``), which starts the engine,
runs the gRPC server and the tasks of every second (the dashboard's, the workers' metrics), and
stops them. ``build_parts(settings)`` builds both, logs which stores it opened (passwords
masked) and how many rules it loaded from which files, and makes the observers the settings
ask for (the metrics, the dashboard, the access and decision logs, the traces).
``from_environment`` is a worker's app (uvicorn's factory), from the variables ``serve`` set.
Starlette is the ``server`` extra, imported here only when building: without it,
``MissingExtraError`` names the extra to install.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, NamedTuple

from ratekeeper.core.errors import MissingExtraError
from ratekeeper.core.moved import keywords_renamed
from ratekeeper.core.redaction import redacted
from ratekeeper.core.wording import many
from ratekeeper.service.healthcheck import HealthCheck, following
from ratekeeper.service.observe.logs import ACCESS, configure_logging, worker_number
from ratekeeper.service.runtime import collector
from ratekeeper.service.runtime.lifespan import lifespan
from ratekeeper.service.runtime.settings import IN_MEMORY_CONFIG, Settings
from ratekeeper.service.runtime.stats import start_stats

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ratekeeper.engine import AsyncEngine
    from ratekeeper.rules import RuleSet
    from ratekeeper.service.dashboard import Dashboard
    from ratekeeper.service.grpc.tls import GrpcTls
    from ratekeeper.service.http.copies import ProbeCopies
    from ratekeeper.service.inflight import InFlightBound
    from ratekeeper.service.observe.access import AccessLog
    from ratekeeper.service.observe.metrics import Metrics
    from ratekeeper.service.observe.stats import Publisher
    from ratekeeper.service.observe.tracing import Tracing

log = logging.getLogger("ratekeeper.service")


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
            # each worker is a process holding its own share under the "local" policy; the
            # processes count themselves through the store unless told how many they are
            "instances": (
                "auto" if settings.instances is None else settings.instances * settings.workers
            ),
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
        quota_mode=settings.quota_mode,
        merge_domains=settings.merge_domains,
        debt=settings.debt,
    )


@keywords_renamed("create_app", {"admission": "in_flight_bound"})
def create_app(
    engine: AsyncEngine,
    *,
    admin_token: str | None = None,
    ietf_headers: bool = False,
    close_engine: bool = False,
    metrics: Metrics | None = None,
    grpc_address: str | None = None,
    in_flight_bound: InFlightBound | None = None,
    envoy_headers: tuple[str, str, str] | None = None,
    dynamic_metadata: bool = False,
    health_check: HealthCheck | None = None,
    access_log: AccessLog | None = None,
    dashboard: Dashboard | None = None,
    probe_copies: ProbeCopies | None = None,
    grpc_tls: GrpcTls | None = None,
    tracing: Tracing | None = None,
    stats: Publisher | None = None,
) -> Starlette:
    """The service's app over ``engine``: the HTTP app (``ratekeeper.service.http``), with
    what runs beside it wired in. ``admin_token`` turns the override endpoints on;
    ``ietf_headers`` adds ``RateLimit`` and ``RateLimit-Policy``; ``close_engine`` closes the
    engine when the app shuts down. ``metrics`` (tracking ``engine``) is served at
    ``/metrics``. With ``grpc_address``, Envoy's gRPC rate-limit service runs beside it on the
    same event loop, from startup to shutdown. ``in_flight_bound`` (an ``InFlightBound``;
    ``admission`` before) bounds the decisions in flight, over HTTP and gRPC (``metrics`` then
    count those shed). ``envoy_headers`` (the names of
    the limit, remaining and reset headers) puts the rate-limit headers in Envoy's answers,
    over gRPC and ``POST /json`` (``response_headers_to_add``); ``dynamic_metadata`` puts the
    dynamic metadata there. ``health_check`` answers ``/healthcheck`` and gRPC's health
    (``ratekeeper.service.healthcheck``), from startup to shutdown. ``access_log`` (over
    ``engine``) logs every decision request, over HTTP and gRPC. ``dashboard`` (over
    ``engine``) serves ``/dashboard``, ``/v1/stats`` and ``/v1/top``, and records every second
    from startup to shutdown. ``probe_copies`` keeps copies of the probes' answers while
    ``in_flight_bound`` sheds, for the server's protocol to answer from
    (``runtime.protocol``). ``grpc_tls`` serves gRPC over TLS (``service.grpc.tls``).
    ``tracing`` (over ``engine``) traces every decision request, over HTTP and gRPC, and sends
    its last spans at shutdown; ``stats`` (over ``engine``) is flushed a last time at
    shutdown."""
    from ratekeeper.service.http.app import http_app

    if metrics is not None and in_flight_bound is not None:
        metrics.in_flight_bound = in_flight_bound
    return http_app(
        engine,
        admin_token=admin_token,
        ietf_headers=ietf_headers,
        metrics=metrics,
        in_flight_bound=in_flight_bound,
        envoy_headers=envoy_headers,
        dynamic_metadata=dynamic_metadata,
        health_check=health_check,
        access_log=access_log,
        tracing=tracing,
        routes=() if dashboard is None else dashboard.routes(),
        lifespan=lifespan(
            engine,
            close_engine=close_engine,
            metrics=metrics,
            grpc_address=grpc_address,
            in_flight_bound=in_flight_bound,
            envoy_headers=envoy_headers,
            dynamic_metadata=dynamic_metadata,
            health_check=health_check,
            access_log=access_log,
            dashboard=dashboard,
            probe_copies=probe_copies,
            grpc_tls=grpc_tls,
            tracing=tracing,
            stats=stats,
        ),
    )


def build_app(settings: Settings) -> Starlette:
    """The HTTP app of ``settings``, which closes its engine when it shuts down and runs the
    gRPC server (grpc.aio) from its startup to its shutdown."""
    parts = build_parts(settings, grpc_aio=True)
    if shed_first_protocol() is not None:
        from ratekeeper.service.runtime.protocol import ShedFirst

        # this process's: one app per process
        ShedFirst.bound, ShedFirst.copies = parts.in_flight_bound, parts.probe_copies
    return parts.http


def shed_first_protocol() -> str | None:
    """uvicorn's ``http`` protocol for the service, ``runtime.protocol.ShedFirst``, as an
    import string; None without httptools (uvicorn then parses with h11, shedding in the app)."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return None
    return "ratekeeper.service.runtime.protocol:ShedFirst"


class Parts(NamedTuple):
    """The service's parts over one engine: the HTTP app (its lifespan starts and closes the
    engine), and what a gRPC surface beside it shares with it."""

    http: Starlette
    engine: AsyncEngine
    metrics: Metrics
    in_flight_bound: InFlightBound
    access_log: AccessLog | None
    #: The probes' answers copied while the process sheds, for uvicorn's protocol (``grpc_aio``).
    probe_copies: ProbeCopies | None = None
    tracing: Tracing | None = None
    health_check: HealthCheck | None = None


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
    from ratekeeper.service.http.copies import ProbeCopies
    from ratekeeper.service.inflight import InFlightBound
    from ratekeeper.service.observe.metrics import Metrics

    metrics = Metrics(multiprocess=settings.workers > 1)  # the workers' totals, shared
    metrics.track(engine)
    dashboard = _dashboard(engine, metrics, settings)
    _decision_log(engine, settings)
    access_log = _access_log(engine, settings)
    tracing = _tracing(engine, settings)
    stats = start_stats(engine, settings)
    in_flight_bound = InFlightBound(settings.max_in_flight, max_wait=settings.max_wait)
    probe_copies = ProbeCopies() if grpc_aio and shed_first_protocol() is not None else None
    health = following(engine, settings.healthcheck_store, settings.healthcheck_rules)
    http = create_app(
        engine,
        admin_token=settings.admin_token,
        ietf_headers=settings.ietf_headers,
        close_engine=True,
        metrics=metrics,
        grpc_address=str(settings.grpc) if grpc_aio else None,
        in_flight_bound=in_flight_bound,
        envoy_headers=envoy_header_names(settings),
        dynamic_metadata=settings.dynamic_metadata,
        health_check=health,
        access_log=access_log,
        dashboard=dashboard,
        probe_copies=probe_copies,
        grpc_tls=tls_of(settings),
        tracing=tracing,
        stats=stats,
    )
    return Parts(http, engine, metrics, in_flight_bound, access_log, probe_copies, tracing, health)


def tls_of(settings: Settings) -> GrpcTls | None:
    """gRPC's TLS as ``settings`` describe it; None for none."""
    if settings.grpc_tls_cert is None or settings.grpc_tls_key is None:
        return None
    from ratekeeper.service.grpc.tls import GrpcTls

    return GrpcTls(
        settings.grpc_tls_cert,
        settings.grpc_tls_key,
        settings.grpc_tls_client_ca,
        settings.grpc_tls_client_san,
    )


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
    return f"sqlite:///{os.path.join(directory, 'overrides.sqlite3')}"


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


def _tracing(engine: AsyncEngine, settings: Settings) -> Tracing | None:
    """The traces ``settings`` ask for (``--tracing``), this process's own."""
    if settings.tracing == "off":
        return None
    from ratekeeper.service.observe import tracing

    found = tracing.start(
        engine,
        settings.tracing,
        sample_rate=settings.trace_sample_rate,
        service_name=settings.trace_service_name,
        service_namespace=settings.trace_service_namespace,
        service_instance_id=settings.trace_service_instance_id,
    )
    log.info(
        "tracing: on (%s, one span per decision request, %g of them sampled unless the "
        "caller's trace decides)",
        settings.tracing,
        settings.trace_sample_rate,
    )
    return found


def from_environment() -> Starlette:
    """A worker's app, from the ``RATEKEEPER_*`` variables ``serve`` set (uvicorn's factory)."""
    settings = Settings.read(None)
    worker = worker_number() if settings.workers > 1 else None
    configure_logging(
        settings.log_format, settings.log_level, libraries=settings.log_libraries, worker=worker
    )
    app = build_app(settings)
    collector.tune(settings.server)
    return app
