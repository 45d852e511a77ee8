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
``--grpc HOST:PORT``      ``RATEKEEPER_GRPC``           ``127.0.0.1:8081``
``--admin-token TOKEN``   ``RATEKEEPER_ADMIN_TOKEN``    none: the admin endpoints are off
``--on-store-error P``    ``RATEKEEPER_ON_STORE_ERROR`` ``local`` (or ``allow``, ``deny``)
``--instances N``         ``RATEKEEPER_INSTANCES``      ``1``; the ``serve`` instances sharing
                                                        the store: under ``local`` each worker
                                                        enforces 1/(N x workers) of every
                                                        limit while the store fails
``--log-format F``        ``RATEKEEPER_LOG_FORMAT``     ``text`` (or ``json``)
``--workers N``           ``RATEKEEPER_WORKERS``        ``1``
``--max-in-flight N``     ``RATEKEEPER_MAX_IN_FLIGHT``  ``1000`` decisions under way at once in
                                                        each process; past it, 503 / UNAVAILABLE
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
``--dashboard``           ``RATEKEEPER_DASHBOARD``      off; ``/dashboard``, ``/v1/stats`` and
                                                        ``/v1/top``, behind the admin token
                                                        (which it needs)
``--server NAME``         ``RATEKEEPER_SERVER``         ``uvicorn`` (HTTP) and grpc.aio (gRPC);
                                                        or ``pyvoy``: both on one address, in
                                                        Envoy (``service.runtime.pyvoy_app``)
========================  ============================  =====================================

``--compat MODE`` (``RATEKEEPER_COMPAT``) reads the settings of Envoy's reference rate-limit
service, envoyproxy/ratelimit, under the flags and ``RATEKEEPER_*`` variables: ``envoy-ratelimit``
reads its environment variables (``REDIS_URL``, ``RUNTIME_ROOT``, ``HOST``, ...) and its runtime
directory, and stops the start on a variable ratekeeper cannot honour (``service.compat``);
``none`` does not; ``envoy-ratelimit`` keeps the overrides in memory (``sqlite://:memory:``)
unless ``--config`` says otherwise, as the reference has no overrides store. Not given, it is
``envoy-ratelimit`` when ``RUNTIME_ROOT`` is set and no ``--rules`` nor ``RATEKEEPER_RULES``
is, else ``none``. ``--merge-domains`` (``RATEKEEPER_MERGE_DOMAINS``, the reference's
``MERGE_DOMAIN_CONFIG``) lets rule files share a domain.

``--plan-cache-size N`` (``RATEKEEPER_PLAN_CACHE_SIZE``, default ``100000``) bounds the limits
each worker process caches (its plans, about 0.5 KB each, the stale ones kept for a configuration
store outage included), and so its memory.

``Settings.read(args, environ)`` checks every value and raises ``ConfigError`` listing each bad
one, named by its flag (and its variable when it came from there); ``Settings.sources`` keeps
those names. HTTP and gRPC listening on the same port of one address is an error too.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratekeeper.core.errors import ConfigError
from ratekeeper.core.inputs import decimal
from ratekeeper.service.admission import DEFAULT_MAX_IN_FLIGHT, check_limit

EXAMPLE_RULES = str(Path(__file__).parents[1] / "example_rules.yaml")
POLICIES = ("allow", "deny", "local")
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
#: The servers ``serve`` runs the service on: uvicorn and grpc.aio, or pyvoy.
SERVERS = ("uvicorn", "pyvoy")
#: The names of the limit, remaining and reset headers of the gRPC answer, by default.
ENVOY_HEADER_NAMES = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
STORE_SCHEMES = ("memory", "redis", "rediss", "unix", "redis+sentinel", "redis+cluster")
CONFIG_SCHEMES = ("sqlite", "postgres", "postgresql")
#: The configuration store of ``--compat envoy-ratelimit`` when none is given.
IN_MEMORY_CONFIG = "sqlite://:memory:"
MAX_WORKERS = 512
#: The most plans a worker may cache: about 0.5 KB each, so some 50 GB.
MAX_PLAN_CACHE_SIZE = 100_000_000


@dataclass(frozen=True, slots=True)
class Address:
    """A host and a TCP port to listen on."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``ratekeeper serve`` is told; see the module's table."""

    store: str = "memory://"
    config: str = "sqlite:///ratekeeper.db"
    rules: tuple[str, ...] = (EXAMPLE_RULES,)
    http: Address = Address("127.0.0.1", 8080)
    grpc: Address = Address("127.0.0.1", 8081)
    admin_token: str | None = field(default=None, repr=False)
    on_store_error: str = "local"
    instances: int = 1
    log_format: str = "text"
    workers: int = 1
    ietf_headers: bool = False
    plan_cache_size: int = 100_000
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    log_level: str = "info"
    log_keys: bool = False
    log_libraries: tuple[str, ...] = ()
    access_log: bool = False
    shadow_mode: bool = False
    debt: bool = False
    envoy_headers: bool = False
    envoy_header_names: tuple[str, str, str] = ENVOY_HEADER_NAMES
    # -- compatibility with envoyproxy/ratelimit's settings (service.compat) --
    compat: str = "none"
    merge_domains: bool = False
    dashboard: bool = False
    server: str = "uvicorn"
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
        translated = _compat(given, env, values, errors)
        for name, parse in _PARSERS.items():
            flag = "--" + name.replace("_", "-")
            variable = "RATEKEEPER_" + name.upper()
            raw: Any = given.get(name)
            where = flag
            if raw is None and variable in env:
                raw = env[variable]
                if name == "rules":
                    raw = [path for path in raw.split(os.pathsep) if path]
                where = f"{flag} (from ${variable})"
            if raw is None and name in translated:
                raw, source = translated[name]
                where = f"{flag} (from {source})"
            if raw is None:
                continue
            try:
                values[name] = parse(raw)
            except ValueError as error:
                errors.append(f"{where}: {error}")
            sources[name] = where
        settings = cls(**values, sources=sources)
        if _overlap(settings.http, settings.grpc):
            errors.append(
                f"{settings.sources.get('http', '--http')} and "
                f"{settings.sources.get('grpc', '--grpc')}: HTTP ({settings.http}) and gRPC "
                f"({settings.grpc}) need ports of their own"
            )
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


_WILDCARDS = ("0.0.0.0", "::")


def _overlap(one: Address, other: Address) -> bool:
    """Whether two listeners would need the same port of the same address."""
    return one.port == other.port and (
        one.host == other.host or one.host in _WILDCARDS or other.host in _WILDCARDS
    )


def _compat(
    given: Mapping[str, Any], env: Mapping[str, str], values: dict[str, Any], errors: list[str]
) -> dict[str, tuple[Any, str]]:
    """The raw values envoyproxy/ratelimit's settings give, with their sources, when
    ``--compat`` reads them (``service.compat``); their errors are added to ``errors``, and
    the mode and the lines to log to ``values``."""
    from ratekeeper.service import compat

    rules_given = given.get("rules") is not None or "RATEKEEPER_RULES" in env
    try:
        mode, why = compat.mode(given.get("compat"), env, rules_given)
    except ValueError as error:
        where = (
            "--compat" if given.get("compat") is not None else "--compat (from $RATEKEEPER_COMPAT)"
        )
        errors.append(f"{where}: {error}")
        return {}
    values["compat"] = mode
    if mode == compat.NONE:
        unread = None if why or "RUNTIME_ROOT" in env else compat.unread(env)
        if unread is not None:
            values["notes"] = ((logging.WARNING, unread),)
        return {}
    named = {
        name
        for name in _PARSERS
        if given.get(name) is not None or "RATEKEEPER_" + name.upper() in env
    }
    translation = compat.translate(env, named)
    errors.extend(translation.errors)
    if "config" not in named:  # the reference keeps no overrides: write no file unasked
        # said by the service's own "configuration store:" line, once
        translation.values["config"] = (IN_MEMORY_CONFIG, f"--compat {mode}")
    level = logging.INFO if why.startswith(("--", "$")) else logging.WARNING
    values["notes"] = (
        (
            level,
            f"reading envoyproxy/ratelimit's variables and runtime directory ({why}); "
            "the flags and RATEKEEPER_* variables win over them",
        ),
        *translation.notes,
    )
    return translation.values


def _url(schemes: tuple[str, ...]) -> Any:
    def parse(value: str) -> str:
        scheme, separator, _ = value.partition("://")
        if not separator or scheme.lower() not in schemes:
            from ratekeeper.core.redaction import redacted

            known = ", ".join(f"{name}://" for name in schemes)
            raise ValueError(
                f"expected a URL starting with one of {known}, not {redacted(value)!r}"
            )
        return value

    return parse


def _rules(value: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        raise ValueError("expected at least one rule file or directory")
    for path in value:
        if not Path(path).exists():
            raise ValueError(f"no such file or directory: {path!r}")
    return tuple(value)


def _address(value: str) -> Address:
    host, separator, port = value.rpartition(":")
    host = host.strip("[]")
    if not separator or not host or not decimal(port) or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT with a port from 1 to 65535, not {value!r}")
    return Address(host, int(port))


def _token(value: str) -> str | None:
    if value == "":
        return None
    if len(value) < 16 or any(
        not character.isprintable() or character.isspace() for character in value
    ):
        raise ValueError("a token is at least 16 printable characters without spaces")
    return value


def _one_of(choices: tuple[str, ...]) -> Any:
    def parse(value: str) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, not {value!r}")
        return value

    return parse


def _workers(value: str | int) -> int:
    text = str(value).strip()
    if not decimal(text) or not 1 <= int(text) <= MAX_WORKERS:
        raise ValueError(f"expected a whole number from 1 to {MAX_WORKERS}, not {value!r}")
    return int(text)


def _instances(value: str | int) -> int:
    text = str(value).strip()
    if not decimal(text) or int(text) < 1:
        raise ValueError(f"expected a whole number of at least 1, not {value!r}")
    return int(text)


def _plan_cache_size(value: str | int) -> int:
    text = str(value).strip()
    if not decimal(text) or not 1 <= int(text) <= MAX_PLAN_CACHE_SIZE:
        raise ValueError(
            f"expected a whole number of plans from 1 to {MAX_PLAN_CACHE_SIZE}, not {value!r}"
        )
    return int(text)


def _log_level(value: str) -> str:
    text = value.strip().lower()
    text = {"warn": "warning", "fatal": "error", "panic": "error", "trace": "debug"}.get(text, text)
    if text not in LOG_LEVELS:
        raise ValueError(f"expected one of debug, info, warn (or warning), error, not {value!r}")
    return text


#: What a logger's name may hold.
_LOGGER_NAME = frozenset("._-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _log_libraries(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    names = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
    names = [name for name in names if name]
    for name in names:
        if not set(name) <= _LOGGER_NAME or name.startswith(".") or name.endswith("."):
            raise ValueError(
                f"expected logger names separated by commas (grpc,redis), or all, not {value!r}"
            )
    return tuple(dict.fromkeys(names))


#: What a header name may hold: an HTTP token (RFC 9110, 5.6.2).
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _header_names(value: str | tuple[str, ...] | list[str]) -> tuple[str, str, str]:
    names = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
    if len(names) != 3 or not all(
        isinstance(name, str) and name and set(name) <= _TOKEN for name in names
    ):
        raise ValueError(
            f"expected three header names LIMIT,REMAINING,RESET, such as "
            f"{','.join(ENVOY_HEADER_NAMES)}, not {value!r}"
        )
    if len({name.lower() for name in names}) != 3:
        raise ValueError(f"expected three different header names, not {value!r}")
    if any(name.lower() == "retry-after" for name in names):  # sent beside them on a refusal
        raise ValueError(f"Retry-After is sent on its own; name three others, not {value!r}")
    return names[0], names[1], names[2]


def _switch(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, not {value!r}")


_PARSERS: dict[str, Any] = {
    "store": _url(STORE_SCHEMES),
    "config": _url(CONFIG_SCHEMES),
    "rules": _rules,
    "http": _address,
    "grpc": _address,
    "admin_token": _token,
    "on_store_error": _one_of(POLICIES),
    "instances": _instances,
    "log_format": _one_of(LOG_FORMATS),
    "workers": _workers,
    "ietf_headers": _switch,
    "plan_cache_size": _plan_cache_size,
    "max_in_flight": check_limit,
    "log_level": _log_level,
    "log_keys": _switch,
    "log_libraries": _log_libraries,
    "access_log": _switch,
    "shadow_mode": _switch,
    "debt": _switch,
    "envoy_headers": _switch,
    "envoy_header_names": _header_names,
    "merge_domains": _switch,
    "dashboard": _switch,
    "server": _one_of(SERVERS),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the service's flags to ``parser``; each defaults to None (not given)."""
    parser.add_argument("--store", metavar="URL", help="request store (default memory://)")
    parser.add_argument(
        "--config", metavar="URL", help="configuration store (default sqlite:///ratekeeper.db)"
    )
    parser.add_argument(
        "--rules",
        metavar="PATH",
        action="append",
        help="rule file or directory, repeatable (default: the example rules)",
    )
    parser.add_argument("--http", metavar="HOST:PORT", help="HTTP address (default 127.0.0.1:8080)")
    parser.add_argument("--grpc", metavar="HOST:PORT", help="gRPC address (default 127.0.0.1:8081)")
    parser.add_argument(
        "--admin-token",
        metavar="TOKEN",
        help="bearer token of the override endpoints (default: they are off)",
    )
    parser.add_argument("--on-store-error", metavar="POLICY", help="local (default), allow or deny")
    parser.add_argument(
        "--instances", metavar="N", help="instances sharing the request store (default 1)"
    )
    parser.add_argument("--log-format", metavar="FORMAT", help="text (default) or json")
    parser.add_argument("--workers", metavar="N", help="worker processes (default 1)")
    parser.add_argument(
        "--server",
        metavar="NAME",
        help="uvicorn (default): HTTP on uvicorn, gRPC on grpc.aio at --grpc. pyvoy: both on "
        "--http, in Envoy (pyvoy); for gRPC-heavy traffic: less than half the CPU a gRPC call "
        "(an HTTP check a quarter more); it loses --workers (one process, one event loop), "
        "compressed gRPC messages and grpc.aio's keepalive policy; needs ratekeeper[pyvoy] "
        "(docs/service.md)",
    )
    parser.add_argument(
        "--max-in-flight",
        metavar="N",
        help=f"decisions under way at once in each process; past it, requests are answered "
        f"503 overloaded (gRPC UNAVAILABLE) at once (default {DEFAULT_MAX_IN_FLIGHT})",
    )
    parser.add_argument(
        "--ietf-headers",
        action="store_const",
        const=True,
        help="add the IETF RateLimit and RateLimit-Policy fields to answers",
    )
    parser.add_argument(
        "--plan-cache-size",
        metavar="N",
        help="limits (plans) each worker caches, about 0.5 KB each, stale ones included "
        "(default 100000)",
    )
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        help="debug, info (default), warning or error, for ratekeeper's and uvicorn's loggers; "
        "debug logs every decision",
    )
    parser.add_argument(
        "--log-keys",
        action="store_const",
        const=True,
        help="at --log-level debug, each decision's line carries its key (the descriptor's "
        "values: the clients' own data); off by default",
    )
    parser.add_argument(
        "--log-libraries",
        metavar="NAMES",
        help="other libraries' loggers that follow --log-level (grpc,redis,...; all: every "
        "one); by default they log from warning",
    )
    parser.add_argument(
        "--access-log",
        action="store_const",
        const=True,
        help="log one line per request: surface, status, time, and the decision's domain and rule",
    )
    parser.add_argument(
        "--shadow-mode",
        action="store_const",
        const=True,
        help="let every request through: refusals are only logged and counted as shadowed",
    )
    parser.add_argument(
        "--debt",
        action="store_const",
        const=True,
        help="every hit counts, refused or not, as envoyproxy/ratelimit counts: a count past "
        "its limit is a debt that refuses later hits until time pays it back",
    )
    parser.add_argument(
        "--envoy-headers",
        action="store_const",
        const=True,
        help="the gRPC answer carries the rate-limit headers and Retry-After for Envoy to add",
    )
    parser.add_argument(
        "--envoy-header-names",
        metavar="LIMIT,REMAINING,RESET",
        help="the names of --envoy-headers (default " + ",".join(ENVOY_HEADER_NAMES) + ")",
    )
    parser.add_argument(
        "--compat",
        metavar="MODE",
        help="envoy-ratelimit: also read envoyproxy/ratelimit's variables (REDIS_URL, "
        "RUNTIME_ROOT, ...) under these flags; none: do not (default: envoy-ratelimit when "
        "RUNTIME_ROOT is set and no rules are given)",
    )
    parser.add_argument(
        "--merge-domains",
        action="store_const",
        const=True,
        help="let rule files share a domain: their descriptors join one tree",
    )
    parser.add_argument(
        "--dashboard",
        action="store_const",
        const=True,
        help="serve a live dashboard at /dashboard, and its figures at /v1/stats and /v1/top, "
        "to the holder of --admin-token",
    )
