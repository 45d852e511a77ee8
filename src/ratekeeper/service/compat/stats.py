"""The reference's statistics settings, read as it reads them (``src/settings/settings.go``,
``src/service_cmd/runner/runner.go``).

- ``USE_STATSD`` (its default: true) sends to ``STATSD_HOST:STATSD_PORT`` over TCP
  (``--statsd``); ``USE_DOG_STATSD`` to the same address over UDP (``--dogstatsd``), renamed by
  ``USE_DOG_STATSD_MOGRIFIERS``; ``USE_PROMETHEUS`` serves them at ``PROMETHEUS_ADDR`` and
  ``PROMETHEUS_PATH`` (``--stats-prometheus``), mapped by ``PROMETHEUS_MAPPER_YAML``;
  ``DISABLE_STATS`` turns all of them off. ``EXTRA_TAGS``, ``STATS_FLUSH_INTERVAL`` and
  ``NEAR_LIMIT_RATIO`` follow.
- A team that set nothing gets what the reference sends: StatsD to ``localhost:8125``. If
  ``ratekeeper[statsd]`` is not installed, that default alone is dropped with a warning rather
  than stopping the start; ``USE_STATSD=true`` said outright needs it.
- The reference refuses two sinks at once; ratekeeper sends to each one asked for, and says so.
"""

from __future__ import annotations

import importlib.util
import logging

from ratekeeper.service.compat.reader import Notes, Reader, Refused


def _off(env: Reader) -> bool:
    return env.switch("DISABLE_STATS")


def _address(env: Reader) -> str:
    host = env.text("STATSD_HOST") or "localhost"
    return (
        f"[{host}]:{env.port('STATSD_PORT')}"
        if ":" in host
        else f"{host}:{env.port('STATSD_PORT')}"
    )


def statsd(env: Reader, notes: Notes) -> str:
    """``--statsd`` from ``USE_STATSD``, ``STATSD_HOST``, ``STATSD_PORT`` and ``DISABLE_STATS``."""
    if _off(env) or not env.switch("USE_STATSD"):
        return "off"
    address = _address(env)
    if not env.given("USE_STATSD") and importlib.util.find_spec("statsd") is None:
        notes.append(
            (
                logging.WARNING,
                f"$USE_STATSD=true (the reference's default): the statistics are not sent to "
                f"StatsD at {address}: install ratekeeper[statsd], or set USE_STATSD=false",
            )
        )
        return "off"
    default = "" if env.given("USE_STATSD") else " (the reference's default)"
    notes.append(
        (
            logging.INFO,
            f"$USE_STATSD=true{default}: the statistics go to StatsD at {address} over TCP "
            "(--statsd); USE_STATSD=false stops them",
        )
    )
    _both(env, notes)
    return address


def _both(env: Reader, notes: Notes) -> None:
    others = [name for name in ("USE_DOG_STATSD", "USE_PROMETHEUS") if env.switch(name)]
    if others:
        notes.append(
            (
                logging.INFO,
                f"$USE_STATSD and ${', $'.join(others)} are both true: the reference refuses "
                "more than one sink; ratekeeper sends to each",
            )
        )


def dogstatsd(env: Reader, notes: Notes) -> str:
    """``--dogstatsd`` from ``USE_DOG_STATSD``, ``STATSD_HOST`` and ``STATSD_PORT``."""
    if _off(env) or not env.switch("USE_DOG_STATSD"):
        return "off"
    return _address(env)


def mogrifiers(env: Reader, notes: Notes) -> str | None:
    return env.text("USE_DOG_STATSD_MOGRIFIERS") if env.given("USE_DOG_STATSD_MOGRIFIERS") else None


def tags(env: Reader, notes: Notes) -> str | None:
    return env.text("EXTRA_TAGS") if env.given("EXTRA_TAGS") else None


def flush_interval(env: Reader, notes: Notes) -> str:
    seconds = env.seconds("STATS_FLUSH_INTERVAL")
    if seconds <= 0:
        raise Refused(f"$STATS_FLUSH_INTERVAL: expected a duration above 0, not {seconds!r}")
    return repr(seconds)


def prometheus(env: Reader, notes: Notes) -> str:
    """``--stats-prometheus`` from ``USE_PROMETHEUS`` and ``PROMETHEUS_ADDR``."""
    if _off(env) or not env.switch("USE_PROMETHEUS"):
        return "off"
    return env.text("PROMETHEUS_ADDR") or ":9090"


def prometheus_path(env: Reader, notes: Notes) -> str | None:
    return env.text("PROMETHEUS_PATH") if env.given("PROMETHEUS_PATH") else None


def prometheus_mapper(env: Reader, notes: Notes) -> str | None:
    return env.text("PROMETHEUS_MAPPER_YAML") or None


def near_limit_ratio(env: Reader, notes: Notes) -> str | None:
    return env.text("NEAR_LIMIT_RATIO") if env.given("NEAR_LIMIT_RATIO") else None
