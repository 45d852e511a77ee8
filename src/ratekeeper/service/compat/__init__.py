"""``ratekeeper serve`` as a drop-in for Envoy's reference rate-limit service
(envoyproxy/ratelimit): its environment variables and its runtime directory.

``mode(flag, environ, rules_given)`` says whether to read them: ``--compat envoy-ratelimit`` or
``RATEKEEPER_COMPAT=envoy-ratelimit`` asks for it, ``none`` refuses it, and when neither is
given it is read when ``RUNTIME_ROOT`` is set and no ``--rules`` nor ``RATEKEEPER_RULES`` is.

``unread(environ)`` names the reference's distinctive variables that are set when the mode is
``none`` without being asked for, so that ``serve`` can warn that they are not read.

``translate(environ, given)`` turns the variables (``variables.VARIABLES``: all 114 of the
reference, each with its default when unset) into raw setting values for ``Settings.read``,
each with the variables it came from. The flags and ``RATEKEEPER_*`` variables still win: a
setting named in ``given`` is not translated, and its variables are not checked. Every
variable ratekeeper cannot honour is an error naming it and why; each ignored one that is set
is a line for ``serve`` to log. ``runtime`` reads the runtime directory, ``store`` the Redis
variables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any, NamedTuple

from ratekeeper.service.compat import stats
from ratekeeper.service.compat.reader import Notes, Reader, Refused, refusal
from ratekeeper.service.compat.variables import IGNORED, VARIABLES

#: The value of ``--compat`` that reads the reference's settings, and the one that does not.
ENVOY_RATELIMIT, NONE = "envoy-ratelimit", "none"
MODES = (ENVOY_RATELIMIT, NONE)


class Translation(NamedTuple):
    """What the reference's settings say: ``values`` maps a ``Settings`` field to its raw
    value and the variables it came from; ``errors`` name each variable that stops the start;
    ``notes`` are ``(logging level, message)`` lines to log once logging is set up."""

    values: dict[str, tuple[Any, str]]
    errors: list[str]
    notes: Notes


def mode(flag: str | None, environ: Mapping[str, str], rules_given: bool) -> tuple[str, str]:
    """The compatibility mode and why: ``--compat`` (``flag``), else ``RATEKEEPER_COMPAT``,
    else ``envoy-ratelimit`` when ``RUNTIME_ROOT`` is set and no rules are given, else
    ``none``. Raises ``ValueError`` for a mode not in ``MODES``."""
    variable = environ.get("RATEKEEPER_COMPAT") or None
    for given, where in ((flag, "--compat"), (variable, "$RATEKEEPER_COMPAT")):
        if given is None:
            continue
        if given not in MODES:
            raise ValueError(f"expected one of {', '.join(MODES)}, not {given!r}")
        return given, where
    if "RUNTIME_ROOT" in environ and not rules_given:
        return ENVOY_RATELIMIT, "RUNTIME_ROOT is set and neither --rules nor $RATEKEEPER_RULES is"
    return NONE, ""


#: Variables only the reference's deployments set: one of them set while ``RUNTIME_ROOT`` is
#: not is a warning (``HOST``, ``PORT``, ``LOG_LEVEL`` and such are too common to tell).
DISTINCTIVE = (
    "REDIS_URL",
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_AUTH",
    "REDIS_PERSECOND",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_WATCH_ROOT",
    "RUNTIME_IGNOREDOTFILES",
    "GRPC_PORT",
    "USE_STATSD",
    "BACKEND_TYPE",
    "CACHE_KEY_PREFIX",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "SHADOW_MODE",
    "MERGE_DOMAIN_CONFIG",
)


def unread(environ: Mapping[str, str]) -> str | None:
    """The warning to log when the mode is ``none`` though it was not asked for and some of
    ``DISTINCTIVE`` are set in ``environ``: they name them and say how to read them; None
    when none is set."""
    present = [f"${name}" for name in DISTINCTIVE if name in environ]
    if not present:
        return None
    return (
        f"{', '.join(present)}: set but not read: ratekeeper reads envoyproxy/ratelimit's "
        "variables with --compat envoy-ratelimit (or RATEKEEPER_COMPAT=envoy-ratelimit), or "
        "when RUNTIME_ROOT is set and no rules are given"
    )


def translate(environ: Mapping[str, str], given: Collection[str] = ()) -> Translation:
    """The settings the reference's variables in ``environ`` describe, less those in ``given``
    (names of ``Settings`` fields that flags or ``RATEKEEPER_*`` variables set)."""
    found = Translation({}, [], [])
    env = Reader(environ)
    for name, (translate_one, variables) in _SETTINGS.items():
        if name in given:
            present = [f"${variable}" for variable in variables if variable in environ]
            if present:
                flag = "--" + name.replace("_", "-")
                found.notes.append((logging.INFO, f"{', '.join(present)}: not read: {flag} wins"))
            continue
        try:
            value = translate_one(env, found.notes)
        except Refused as error:
            found.errors.append(str(error))
            continue
        if value is not None:
            set_ = [variable for variable in variables if variable in environ]
            found.values[name] = (value, ", ".join(f"${v}" for v in set_ or variables))
    for check in _CHECKS:
        try:
            check(env)
        except Refused as error:
            found.errors.append(str(error))
    found.notes.extend(_ignored(env))
    return found


# -- the settings ---------------------------------------------------------------------------


def _grpc(env: Reader, notes: Notes) -> str:
    """``GRPC_UDS``, a Unix socket's path, wins over ``GRPC_HOST`` and ``GRPC_PORT``."""
    if env.text("GRPC_UDS"):
        return "unix:" + env.text("GRPC_UDS")
    return _address(env, "GRPC_HOST", "GRPC_PORT")


#: The reference's TLS files, by the setting each feeds; read only with GRPC_SERVER_USE_TLS.
_TLS_FILES = {
    "grpc_tls_cert": "GRPC_SERVER_TLS_CERT",
    "grpc_tls_key": "GRPC_SERVER_TLS_KEY",
    "grpc_tls_client_ca": "GRPC_CLIENT_TLS_CACERT",
    "grpc_tls_client_san": "GRPC_CLIENT_TLS_SAN",
}


def _tls(name: str) -> Callable[[Reader, Notes], str | None]:
    """The translation of ``_TLS_FILES[name]``: its value when ``GRPC_SERVER_USE_TLS`` is
    true and the certificate and key are both given, else None. The certificate's says why
    not: the reference stops without them, and reads none of the files without TLS."""
    variable = _TLS_FILES[name]

    def read(env: Reader, notes: Notes) -> str | None:
        try:
            use_tls = env.switch("GRPC_SERVER_USE_TLS")
        except Refused:
            if name == "grpc_tls_cert":
                raise
            return None  # the certificate's translation says why, once
        cert, key = env.text("GRPC_SERVER_TLS_CERT"), env.text("GRPC_SERVER_TLS_KEY")
        if not use_tls:
            if name == "grpc_tls_cert":
                for unread in _TLS_FILES.values():
                    if env.text(unread):
                        message = f"${unread}: not read: $GRPC_SERVER_USE_TLS is not true"
                        notes.append((logging.INFO, message))
            return None
        if not cert or not key:
            if name == "grpc_tls_cert":
                raise Refused(
                    f"$GRPC_SERVER_USE_TLS={env.text('GRPC_SERVER_USE_TLS')}: TLS needs "
                    "$GRPC_SERVER_TLS_CERT and $GRPC_SERVER_TLS_KEY, the server's certificate "
                    "and key files"
                )
            return None
        return env.text(variable)

    return read


def _address(env: Reader, host: str, port: str) -> str:
    name = env.text(host) or "0.0.0.0"  # Go listens on every address for ":8080"
    number = env.port(port)
    return f"[{name}]:{number}" if ":" in name else f"{name}:{number}"


def _log_level(env: Reader, notes: Notes) -> str | None:
    # Unset, ratekeeper's own default (info) stands: the reference's WARN would hide
    # ratekeeper's start-up lines, which the reference logs as warnings.
    return env.text("LOG_LEVEL") if env.given("LOG_LEVEL") else None


def _log_format(env: Reader, notes: Notes) -> str | None:
    if not env.given("LOG_FORMAT"):
        return None
    return "json" if env.text("LOG_FORMAT").lower() == "json" else "text"  # as the reference


def _switch(variable: str) -> Callable[[Reader, Notes], str]:
    def read(env: Reader, notes: Notes) -> str:
        return "true" if env.switch(variable) else "false"

    return read


def _debt(env: Reader, notes: Notes) -> str:
    """The reference counts every hit, refused or not, unless told to stop at the limit."""
    stop = env.switch("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
    if not stop:
        default = "" if env.given("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") else " (its default)"
        notes.append(
            (
                logging.INFO,
                f"$STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false{default}: every hit counts, "
                "refused or not, as the reference counts (--debt)",
            )
        )
    return "false" if stop else "true"


def _header_names(env: Reader, notes: Notes) -> str:
    names = ("LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER")
    return ",".join(env.text(name) for name in names)


def _rules(env: Reader, notes: Notes) -> list[str]:
    from ratekeeper.service.compat.runtime import runtime_rules

    return [runtime_rules(env)]


def _store(env: Reader, notes: Notes) -> str:
    from ratekeeper.service.compat.store import store_url

    return store_url(env, notes)


def _tracing(env: Reader, notes: Notes) -> str | None:
    """The exporter: OTLP over ``http`` (the reference's default; empty too) or ``grpc``, when
    ``TRACING_ENABLED``; the endpoint is the standard ``OTEL_EXPORTER_OTLP_*`` variables'."""
    if not env.switch("TRACING_ENABLED"):
        return None
    protocol = env.text("TRACING_EXPORTER_PROTOCOL")
    if protocol not in ("http", "", "grpc"):
        raise Refused(
            f"$TRACING_EXPORTER_PROTOCOL: expected http or grpc, not {protocol!r} (the "
            "reference stops its start too)"
        )
    return "otlp-grpc" if protocol == "grpc" else "otlp-http"


def _traced(variable: str, unset: bool = True) -> Callable[[Reader, Notes], str | None]:
    """``variable`` as it is (its default when not set, if ``unset``), when tracing is on."""

    def read(env: Reader, notes: Notes) -> str | None:
        if not _true(env, "TRACING_ENABLED") or not (unset or env.given(variable)):
            return None
        return env.text(variable)

    return read


def _group(flag: str) -> tuple[str, ...]:
    return tuple(name for name, variable in VARIABLES.items() if variable.setting == flag)


#: Each ``Settings`` field the reference's variables feed: how, and from which variables.
_SETTINGS: dict[str, tuple[Callable[[Reader, Notes], Any], tuple[str, ...]]] = {
    "http": (lambda env, notes: _address(env, "HOST", "PORT"), _group("--http")),
    "grpc": (_grpc, _group("--grpc")),
    **{name: (_tls(name), _group("--" + name.replace("_", "-"))) for name in _TLS_FILES},
    "log_level": (_log_level, _group("--log-level")),
    "log_format": (_log_format, _group("--log-format")),
    "rules": (_rules, _group("--rules")),
    "merge_domains": (_switch("MERGE_DOMAIN_CONFIG"), _group("--merge-domains")),
    "store": (_store, _group("--store")),
    "shadow_mode": (_switch("SHADOW_MODE"), _group("--shadow-mode")),
    "quota_mode": (_switch("QUOTA_MODE"), _group("--quota-mode")),
    "dynamic_metadata": (_switch("RESPONSE_DYNAMIC_METADATA"), _group("--dynamic-metadata")),
    "healthcheck_store": (
        _switch("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"),
        _group("--healthcheck-store"),
    ),
    "healthcheck_rules": (
        _switch("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"),
        _group("--healthcheck-rules"),
    ),
    "debt": (_debt, _group("--debt")),
    "envoy_headers": (_switch("LIMIT_RESPONSE_HEADERS_ENABLED"), _group("--envoy-headers")),
    "envoy_header_names": (_header_names, _group("--envoy-header-names")),
    "tracing": (_tracing, _group("--tracing")),
    "trace_sample_rate": (_traced("TRACING_SAMPLING_RATE"), _group("--trace-sample-rate")),
    "trace_service_name": (_traced("TRACING_SERVICE_NAME"), _group("--trace-service-name")),
    "trace_service_namespace": (
        _traced("TRACING_SERVICE_NAMESPACE", unset=False),
        _group("--trace-service-namespace"),
    ),
    "trace_service_instance_id": (
        _traced("TRACING_SERVICE_INSTANCE_ID", unset=False),
        _group("--trace-service-instance-id"),
    ),
    "statsd": (stats.statsd, _group("--statsd")),
    "dogstatsd": (stats.dogstatsd, (*_group("--dogstatsd"), "STATSD_HOST", "STATSD_PORT")),
    "dogstatsd_mogrifiers": (stats.mogrifiers, _group("--dogstatsd-mogrifiers")),
    "stats_tags": (stats.tags, _group("--stats-tags")),
    "stats_flush_interval": (stats.flush_interval, _group("--stats-flush-interval")),
    "stats_prometheus": (stats.prometheus, _group("--stats-prometheus")),
    "stats_prometheus_path": (stats.prometheus_path, _group("--stats-prometheus-path")),
    "stats_prometheus_mapper": (stats.prometheus_mapper, _group("--stats-prometheus-mapper")),
    "near_limit_ratio": (stats.near_limit_ratio, _group("--near-limit-ratio")),
}


# -- the variables ratekeeper follows at some values only -------------------------------------


def _only(variable: str, *accepted: str) -> Callable[[Reader], None]:
    """A check that refuses ``variable`` at any value but ``accepted``."""

    def check(env: Reader) -> None:
        if env.text(variable) not in accepted:
            raise refusal(variable, env.text(variable))

    return check


def _off(variable: str) -> Callable[[Reader], None]:
    """A check that refuses ``variable`` when true."""

    def check(env: Reader) -> None:
        if env.switch(variable):
            raise refusal(variable, env.text(variable))

    return check


#: The checked variables that feed no setting (the Redis ones are checked with the store).
_CHECKS = (_only("CONFIG_TYPE", "FILE"),)


# -- the variables ratekeeper ignores -----------------------------------------------------------


def _ignored(env: Reader) -> Notes:
    """One line for each ignored variable that is set."""
    notes: Notes = []
    for name, variable in VARIABLES.items():
        if variable.fate != IGNORED or not env.given(name):
            continue
        default = "" if env.given(name) else " (the reference's default)"
        level = logging.WARNING if variable.warn else logging.INFO
        notes.append((level, f"${name}={env.text(name)}{default}: ignored: {variable.note}"))
    return notes


def _true(env: Reader, name: str) -> bool:
    """Whether a switch is on; a value that is no Go bool counts as on."""
    try:
        return env.switch(name)
    except Refused:
        return True
