"""What each setting of ``ratekeeper serve`` may be: its parser, by the setting's name
(``PARSERS``), and the choices and bounds the parsers hold values to. A parser takes the text
of a flag or a variable (or a value already typed) and returns the setting's value, or raises
``ValueError`` saying what it expected, for ``Settings.read`` to name the flag it came from.
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratekeeper.core.inputs import decimal
from ratekeeper.service.inflight import check_limit
from ratekeeper.service.waiting import check_wait

POLICIES = ("allow", "deny", "local")
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
#: The servers ``serve`` runs the service on: uvicorn and grpc.aio, or pyvoy.
SERVERS = ("uvicorn", "pyvoy")
#: The exporters of ``--tracing``: none, OTLP over HTTP (protobuf) or over gRPC.
TRACING = ("off", "otlp-http", "otlp-grpc")
#: The names of the limit, remaining and reset headers of the gRPC answer, by default.
ENVOY_HEADER_NAMES = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
STORE_SCHEMES = ("memory", "redis", "rediss", "unix", "redis+sentinel", "redis+cluster")
CONFIG_SCHEMES = ("sqlite", "postgres", "postgresql")
MAX_WORKERS = 512
#: The most instances ``--instances`` takes (each of up to ``MAX_WORKERS`` processes).
MAX_INSTANCES = 10_000
#: The most plans a worker may cache: about 0.5 KB each, so some 50 GB.
MAX_PLAN_CACHE_SIZE = 100_000_000


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """A host and a TCP port to listen on (``--http``, ``--grpc``)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class UnixAddress:
    """The path of a Unix socket to listen on (``--grpc unix:PATH``, grpc's own syntax)."""

    path: str

    def __str__(self) -> str:
        return f"unix:{self.path}"


#: The longest path a Unix socket may have (``sun_path`` holds 108 bytes, the last a NUL).
MAX_SOCKET_PATH = 107


def url(schemes: tuple[str, ...]) -> Any:
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


def rules(value: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        raise ValueError("expected at least one rule file or directory")
    for path in value:
        if not Path(path).exists():
            raise ValueError(f"no such file or directory: {path!r}")
    return tuple(value)


def address(value: str) -> ListenAddress:
    host, separator, port = value.rpartition(":")
    host = host.strip("[]")
    if not separator or not host or not decimal(port) or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT with a port from 1 to 65535, not {value!r}")
    return ListenAddress(host, int(port))


def grpc_address(value: str | ListenAddress | UnixAddress) -> ListenAddress | UnixAddress:
    """``HOST:PORT``, or ``unix:PATH`` (``unix:///PATH`` too): a Unix socket in a directory
    that exists, at a path that is free or holds a socket (grpc replaces a stale one)."""
    if isinstance(value, ListenAddress | UnixAddress):
        return value
    if not value.startswith("unix:"):
        try:
            return address(value)
        except ValueError:
            raise ValueError(
                f"expected HOST:PORT with a port from 1 to 65535, or unix:PATH, not {value!r}"
            ) from None
    path = value.removeprefix("unix:")
    path = "/" + path.lstrip("/") if path.startswith("//") else path
    if not path:
        raise ValueError(f"expected unix:PATH, the socket's path, not {value!r}")
    path = os.path.abspath(path)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ValueError(f"a Unix socket's path is at most {MAX_SOCKET_PATH} bytes: {path!r}")
    if not os.path.isdir(os.path.dirname(path)):
        raise ValueError(f"no such directory: {os.path.dirname(path)!r} (for {value!r})")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return UnixAddress(path)
    if not stat.S_ISSOCK(mode):
        raise ValueError(f"{path!r} exists and is no socket: a Unix socket cannot replace it")
    return UnixAddress(path)


def pem_file(value: str) -> str | None:
    """A readable file holding PEM (``-----BEGIN``); empty: none."""
    if value == "":
        return None
    try:
        with open(value, "rb") as file:
            text = file.read(1 << 20)
    except FileNotFoundError:
        raise ValueError(f"no such file: {value!r}") from None
    except OSError as error:
        raise ValueError(f"cannot read {value!r}: {error.strerror or error}") from None
    if b"-----BEGIN " not in text:
        raise ValueError(f"{value!r} holds no PEM block (-----BEGIN ...)")
    return value


def client_san(value: str) -> str | None:
    """The name (or IP address) a client certificate's SAN must hold; empty: none."""
    if value == "":
        return None
    if any(not character.isprintable() or character.isspace() for character in value):
        raise ValueError(f"expected a DNS name or an IP address, not {value!r}")
    return value


def token(value: str) -> str | None:
    if value == "":
        return None
    if len(value) < 16 or any(
        not character.isprintable() or character.isspace() for character in value
    ):
        raise ValueError("a token is at least 16 printable characters without spaces")
    return value


def one_of(choices: tuple[str, ...]) -> Any:
    def parse(value: str) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, not {value!r}")
        return value

    return parse


def workers(value: str | int) -> int:
    text = str(value).strip()
    if not decimal(text) or not 1 <= int(text) <= MAX_WORKERS:
        raise ValueError(f"expected a whole number from 1 to {MAX_WORKERS}, not {value!r}")
    return int(text)


def instances(value: str | int) -> int | None:
    """A whole number of at least 1, or ``auto`` (None: counted through the store)."""
    text = str(value).strip()
    if text.lower() == "auto":
        return None
    if not decimal(text) or not 1 <= int(text) <= MAX_INSTANCES:
        raise ValueError(
            f"expected auto or a whole number of at least 1 and at most {MAX_INSTANCES:,}, "
            f"not {value!r}"
        )
    return int(text)


def plan_cache_size(value: str | int) -> int:
    text = str(value).strip()
    if not decimal(text) or not 1 <= int(text) <= MAX_PLAN_CACHE_SIZE:
        raise ValueError(
            f"expected a whole number of plans from 1 to {MAX_PLAN_CACHE_SIZE}, not {value!r}"
        )
    return int(text)


def log_level(value: str) -> str:
    text = value.strip().lower()
    text = {"warn": "warning", "fatal": "error", "panic": "error", "trace": "debug"}.get(text, text)
    if text not in LOG_LEVELS:
        raise ValueError(f"expected one of debug, info, warn (or warning), error, not {value!r}")
    return text


#: What a logger's name may hold.
_LOGGER_NAME = frozenset("._-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def log_libraries(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
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


def header_names(value: str | tuple[str, ...] | list[str]) -> tuple[str, str, str]:
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


def switch(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, not {value!r}")


def ratio(value: str | float) -> float:
    """A number from 0 to 1 (``--trace-sample-rate``, ``--near-limit-ratio``)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not 0 <= number <= 1:  # NaN included
        raise ValueError(f"expected a number from 0 to 1, such as 0.01, not {value!r}")
    return number


def name(value: str) -> str | None:
    """A name (``--trace-service-name``); empty, None: not given."""
    text = value.strip()
    if any(not character.isprintable() for character in text):
        raise ValueError(f"expected printable characters, not {value!r}")
    return text or None


def text(value: str) -> str:
    """Printable text, possibly empty (``--trace-service-namespace``, ...)."""
    return name(value) or ""


def optional_address(value: str | ListenAddress | None) -> ListenAddress | None:
    """``HOST:PORT``; ``:PORT`` for every address of this machine (as Go reads it); empty or
    ``off`` for none."""
    if value is None or isinstance(value, ListenAddress):
        return value
    text = value.strip()
    if text.lower() in ("", "off", "none"):
        return None
    return address(f"0.0.0.0{text}" if text.startswith(":") else text)


def stats_tags(value: str | tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``key:value`` pairs separated by commas (the reference's ``EXTRA_TAGS``)."""
    if not isinstance(value, str):
        return tuple(value)
    pairs = []
    for pair in filter(None, (part.strip() for part in value.split(","))):
        key, colon, tag = pair.partition(":")
        if not colon or not key.strip() or not tag.strip():
            raise ValueError(f"expected key:value pairs separated by commas, not {value!r}")
        pairs.append((key.strip(), tag.strip()))
    return tuple(pairs)


def names(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Names of letters, digits and ``_``, separated by commas."""
    found = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
    found = [name for name in found if name]
    if not all(name.replace("_", "").isalnum() and name.isascii() for name in found):
        raise ValueError(
            f"expected names of letters, digits and _ separated by commas, not {value!r}"
        )
    return tuple(found)


def interval(value: str | float) -> float:
    """Seconds above 0, at most a day."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 86_400:
        raise ValueError(f"expected a number of seconds above 0 and at most 86400, not {value!r}")
    return seconds


def url_path(value: str) -> str:
    if not value.startswith("/") or any(not character.isprintable() for character in value):
        raise ValueError(f"expected a path starting with /, not {value!r}")
    return value


def mapper_file(value: str) -> str | None:
    if not value:
        return None
    if not Path(value).is_file():
        raise ValueError(f"no such file: {value!r}")
    return value


#: The parser of each setting, by its name: a ``ValueError`` says what it expected.
PARSERS: dict[str, Any] = {
    "store": url(STORE_SCHEMES),
    "config": url(CONFIG_SCHEMES),
    "rules": rules,
    "http": address,
    "grpc": grpc_address,
    "grpc_tls_cert": pem_file,
    "grpc_tls_key": pem_file,
    "grpc_tls_client_ca": pem_file,
    "grpc_tls_client_san": client_san,
    "admin_token": token,
    "on_store_error": one_of(POLICIES),
    "instances": instances,
    "log_format": one_of(LOG_FORMATS),
    "workers": workers,
    "ietf_headers": switch,
    "plan_cache_size": plan_cache_size,
    "max_in_flight": check_limit,
    "max_wait": check_wait,
    "log_level": log_level,
    "log_keys": switch,
    "log_libraries": log_libraries,
    "access_log": switch,
    "shadow_mode": switch,
    "debt": switch,
    "envoy_headers": switch,
    "envoy_header_names": header_names,
    "dynamic_metadata": switch,
    "quota_mode": switch,
    "healthcheck_store": switch,
    "healthcheck_rules": switch,
    "merge_domains": switch,
    "dashboard": switch,
    "server": one_of(SERVERS),
    "tracing": one_of(TRACING),
    "trace_sample_rate": ratio,
    "trace_service_name": name,
    "trace_service_namespace": text,
    "trace_service_instance_id": text,
    "statsd": optional_address,
    "dogstatsd": optional_address,
    "dogstatsd_mogrifiers": names,
    "stats_tags": stats_tags,
    "stats_flush_interval": interval,
    "stats_prometheus": optional_address,
    "stats_prometheus_path": url_path,
    "stats_prometheus_mapper": mapper_file,
    "near_limit_ratio": ratio,
}
