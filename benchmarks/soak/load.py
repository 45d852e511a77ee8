"""One interval of the soak's load: wrk running ``traffic.lua`` against the service.

Each interval is a separate wrk run, so that its latency percentiles are that interval's own;
each run starts its users where the last one stopped (``offset``), so the long tail of keys is
walked through in turn across the whole soak.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benchmarks.service.load import LoadError

LUA = Path(__file__).with_name("traffic.lua")
_COUNTS = re.compile(
    r"^soak allowed=(\d+) limited=(\d+) degraded=(\d+) other=(\d+) p50=(\d+) p99=(\d+)$",
    re.MULTILINE,
)
_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")


@dataclass(frozen=True)
class Interval:
    """What wrk saw in one interval: answers by outcome, socket errors, latency (seconds)."""

    allowed: int
    limited: int
    degraded: int
    other: int
    socket_errors: int
    p50: float
    p99: float

    @property
    def requests(self) -> int:
        return self.allowed + self.limited + self.degraded + self.other

    @property
    def errors(self) -> int:
        """Answers neither allowed nor limited (5xx, 4xx other than 429) and socket errors."""
        return self.other + self.socket_errors


def delay_ms(rate: float | None, connections: int) -> int:
    """Each connection's pause between requests for about ``rate`` requests a second in all
    (0: as fast as the service answers)."""
    if rate is None:
        return 0
    return max(0, round(connections * 1000 / rate))


def run(
    url: str,
    *,
    seconds: int,
    connections: int,
    keys: int,
    offset: int,
    rate: float | None,
) -> Interval:
    """Drive ``url`` for ``seconds`` with the soak's traffic; the interval's counts."""
    command = [
        "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s",
        "-s", str(LUA), url,
    ]  # fmt: skip
    env = {
        **os.environ,
        "SOAK_KEYS": str(keys),
        "SOAK_OFFSET": str(offset),
        "SOAK_DELAY_MS": str(delay_ms(rate, connections)),
    }
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=seconds + 60, check=False
        )
    except subprocess.TimeoutExpired:
        raise LoadError(f"wrk did not end within {seconds + 60} s") from None
    if done.returncode != 0:
        raise LoadError(f"wrk exited {done.returncode}: {done.stderr.strip()}")
    return parse(done.stdout)


def parse(output: str) -> Interval:
    """The ``Interval`` of wrk's output with ``traffic.lua``'s line."""
    found = _COUNTS.search(output)
    if found is None:
        raise LoadError(f"wrk's output has no counts line:\n{output}")
    allowed, limited, degraded, other, p50, p99 = (int(value) for value in found.groups())
    errors = _SOCKET_ERRORS.search(output)
    socket_errors = sum(int(value) for value in errors.groups()) if errors else 0
    return Interval(allowed, limited, degraded, other, socket_errors, p50 / 1e6, p99 / 1e6)
