"""Where envoyproxy/ratelimit's statistics are sent: StatsD over TCP, DogStatsD over UDP.

Each sink takes the counts of one flush (``send``: name to increase, none of them 0) and sends
them as the reference's sink would:

- ``StatsdSink``: gostats' TCP sink (``NewTCPStatsdSink``): one ``name:value|c`` line per
  counter, ``\\n``-ended, written in batches of at most 64 KiB over one connection, opened
  again at the next flush when it broke (what could not be sent is dropped and logged, as
  gostats drops it). The ``.__key=value`` tags of ``EXTRA_TAGS`` stay in the name, as gostats
  writes them. Through the ``statsd`` package (``ratekeeper[statsd]``).
- ``DogStatsdSink``: the reference's ``godogstats`` sink: the name's ``.__key=value`` tags
  become DogStatsD tags ``key:value``, the first ``Mogrifier`` matching the rest renames it
  and adds its tags, and each counter is sent as ``name:value|c|#tags`` in datagrams packed
  by the ``datadog`` package's ``DogStatsd`` (``ratekeeper[statsd]``); its own telemetry is off.

A missing package raises ``MissingExtraError`` naming the extra to install.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from ratekeeper.core.errors import MissingExtraError
from ratekeeper.core.log_throttle import LogThrottle

log = logging.getLogger("ratekeeper.service")

#: The most bytes gostats' TCP sink writes at once.
BATCH = 1 << 16
#: Seconds to connect and to write, as gostats' TCP sink gives them.
TIMEOUT = 1.5
#: The prefix of a mogrifier's variables: ``DOG_STATSD_MOGRIFIER_<NAME>_PATTERN`` and so on.
MOGRIFIER_PREFIX = "DOG_STATSD_MOGRIFIER_"


class Sink(Protocol):
    """Sends the counts of one flush; never raises."""

    def send(self, counts: Mapping[str, int]) -> None: ...

    def close(self) -> None: ...


def require(module: str) -> Any:
    """``module``, imported; ``MissingExtraError`` naming ``ratekeeper[statsd]`` without it."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise MissingExtraError(module.split(".", maxsplit=1)[0], "statsd") from None


class StatsdSink:
    """StatsD over TCP to ``host:port``, as gostats' TCP sink sends it."""

    def __init__(self, host: str, port: int) -> None:
        stream = require("statsd.client.stream")

        class Client(stream.TCPStatsClient):  # type: ignore[name-defined,misc]
            def _do_send(self, data: str) -> None:  # names are UTF-8, as gostats sends them
                self._sock.sendall(data.encode("utf-8") + b"\n")

        self.address = f"{host}:{port}"
        self.client = Client(host, port, timeout=TIMEOUT, ipv6=":" in host)
        self._failing = LogThrottle(log)

    def send(self, counts: Mapping[str, int]) -> None:
        try:
            pipe = self.client.pipeline()
            size = 0
            for name, value in counts.items():
                line = len(name) + len(str(value)) + 4
                if size + line > BATCH and size:
                    pipe.send()
                    size = 0
                pipe.incr(name, value)
                size += line
            pipe.send()
        except (OSError, UnicodeError) as error:
            self.client.close()  # connected again at the next flush
            self._failing.log(
                logging.WARNING,
                "StatsD: could not send the statistics to %s, dropped: %s",
                self.address,
                error,
                key="statsd",
            )

    def close(self) -> None:
        self.client.close()


class Mogrifier(NamedTuple):
    """One of ``USE_DOG_STATSD_MOGRIFIERS``: a name matching ``pattern`` is renamed ``name``
    and given ``tags``, each ``$n`` in them the pattern's ``n``-th group (``$0``: the match)."""

    pattern: re.Pattern[str]
    name: str
    tags: tuple[tuple[str, str], ...]

    def apply(self, found: re.Match[str]) -> tuple[str, list[str]]:
        groups = [found.group(0), *(group or "" for group in found.groups())]

        def fill(text: str) -> str:
            def one(variable: re.Match[str]) -> str:
                index = int(variable.group()[1:])
                return groups[index] if index < len(groups) else variable.group()

            return re.sub(r"\$\d+", one, text)

        return fill(self.name), [f"{key}:{fill(value)}" for key, value in self.tags]


def mogrifiers(names: Sequence[str], environ: Mapping[str, str] | None = None) -> list[Mogrifier]:
    """The mogrifiers ``names`` (``USE_DOG_STATSD_MOGRIFIERS``), each from its
    ``DOG_STATSD_MOGRIFIER_<NAME>_PATTERN``, ``_NAME`` and ``_TAGS`` (``key:value,...``)
    variables, as the reference reads them. ``ValueError`` names what is missing or bad."""
    env = os.environ if environ is None else environ
    found = []
    for name in names:
        prefix = f"{MOGRIFIER_PREFIX}{name}_"
        pattern, renamed = env.get(prefix + "PATTERN", ""), env.get(prefix + "NAME", "")
        if not pattern:
            raise ValueError(f"no ${prefix}PATTERN for the mogrifier {name}")
        try:
            compiled = re.compile(pattern)
        except re.error as error:
            raise ValueError(f"${prefix}PATTERN: not a regular expression: {error}") from None
        if not renamed:
            raise ValueError(f"no ${prefix}NAME for the mogrifier {name}")
        tags = []
        for pair in filter(None, env.get(prefix + "TAGS", "").split(",")):
            key, colon, value = pair.partition(":")
            if not key.strip() or not colon or not value.strip():
                raise ValueError(f"${prefix}TAGS: expected key:value pairs, not {pair!r}")
            tags.append((key.strip(), value.strip()))
        found.append(Mogrifier(compiled, renamed, tuple(tags)))
    return found


def separated(name: str) -> tuple[str, list[str]]:
    """A gostats name without its ``.__key=value`` tags, and those tags as ``key:value``."""
    short, _, rest = name.partition(".__")
    if not rest:
        return name, []
    tags = []
    for pair in rest.split(".__"):
        key, equals, value = pair.partition("=")
        if equals:
            tags.append(f"{key}:{value}")
    return short, tags


class DogStatsdSink:
    """DogStatsD over UDP to ``host:port``, as the reference's godogstats sink sends it."""

    def __init__(self, host: str, port: int, mogrified: Sequence[Mogrifier] = ()) -> None:
        dogstatsd = require("datadog.dogstatsd.base")
        self.client = dogstatsd.DogStatsd(host=host, port=port, disable_telemetry=True)
        self.mogrifiers = tuple(mogrified)
        self.address = f"{host}:{port}"
        self._names: dict[str, tuple[str, list[str]]] = {}

    def renamed(self, name: str) -> tuple[str, list[str]]:
        """``name`` as DogStatsD gets it: its name and its tags."""
        known = self._names.get(name)
        if known is None:
            short, tags = separated(name)
            for mogrifier in self.mogrifiers:
                found = mogrifier.pattern.search(short)
                if found is not None:
                    short, more = mogrifier.apply(found)
                    tags = tags + more
                    break
            known = self._names[name] = (short, tags)
        return known

    def send(self, counts: Mapping[str, int]) -> None:
        try:
            self.client.open_buffer()
            try:
                for name, value in counts.items():
                    short, tags = self.renamed(name)
                    self.client.increment(short, value, tags=tags or None)
            finally:
                self.client.close_buffer()
        except OSError as error:
            log.warning("DogStatsD: could not send to %s: %s", self.address, error)

    def close(self) -> None:
        self.client.close_socket()
