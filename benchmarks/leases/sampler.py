"""What the store itself counts, read straight from Redis while a run goes, and the server's
command counts around it.

``Sampler`` reads the hot key's state every ``every`` seconds on a thread of the benchmark's
own: for the fixed window its state ``(window_start, count)`` (two little-endian doubles),
keeping the largest count seen per window; for the token bucket and GCRA the state and the
hash of slices held (``<state key>:s``: holder -> two packed doubles, units and expiry), read
together in one MULTI, keeping the largest share of the capacity that the bucket's tokens (as
stored, at the state's own time) and the units held in slices make together. The store's
guarantee is that neither passes the limit. Its own commands are counted, so that they can be
taken out of the server's counts (``commands``).
"""

from __future__ import annotations

import struct
import threading
from collections import Counter
from typing import Any

import redis

#: The sampler's commands per read: the fixed window's, and the buckets'.
WINDOW_READ = ("get",)
BUCKET_READ = ("multi", "get", "hgetall", "exec")
#: Commands that run a script, and the benchmark's own bookkeeping (never a worker's).
SCRIPTS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
BOOKKEEPING = ("config", "info", "flushdb", "scan", "ping")


class Sampler:
    """Read ``key`` (the state key of ``algorithm``'s limit of ``capacity``) every ``every``
    seconds until stopped. ``interval`` is the GCRA's emission interval (period / amount)."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        algorithm: str,
        capacity: int,
        interval: float,
        every: float = 0.005,
    ) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=5)
        self.key, self.algorithm = key, algorithm
        self.capacity, self.interval, self.every = capacity, interval, every
        self.reads = 0
        self.counts: Counter[float] = Counter()  # fixed window: window start -> largest count
        self.fullest = 0.0  # buckets: the largest (tokens + held) / capacity seen
        self.held = 0  # buckets: the most units seen held in slices at once
        self.absent = 0  # buckets: reads with slices held and the state key gone
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="leases-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()

    @property
    def read_commands(self) -> tuple[str, ...]:
        return WINDOW_READ if self.algorithm == "fixed_window" else BUCKET_READ

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.read()

    def read(self) -> None:
        """One read of the key's state (and slices), kept in the largest figures seen."""
        self.reads += 1
        if self.algorithm == "fixed_window":
            raw: Any = self.client.get(self.key)
            if raw is not None and len(raw) == 16:
                start, count = struct.unpack("<dd", raw)
                if count > self.counts[start]:
                    self.counts[start] = count
            return
        pipe = self.client.pipeline(transaction=True)
        pipe.get(self.key)
        pipe.hgetall(self.key + ":s")
        raw, slices = pipe.execute()
        held = sum(struct.unpack("<dd", value)[0] for value in slices.values())
        self.held = max(self.held, int(held))
        if raw is None or len(raw) != 16:
            if held:
                self.absent += 1  # the next exchange reads a full bucket less what is held
            return
        first, _ = struct.unpack("<dd", raw)
        if self.algorithm == "token_bucket":
            tokens = first
        else:  # gcra: the backlog, in emission intervals, is what is not in the bucket
            tokens = self.capacity - first / self.interval
        self.fullest = max(self.fullest, (tokens + held) / self.capacity)


def commands(
    before: dict[str, Any], after: dict[str, Any], own: Counter[str]
) -> tuple[int, int, Counter[str]]:
    """The workers' commands between two ``INFO commandstats``: all of them (a script's inner
    commands included, as Redis counts them), the script calls alone, and each by name; the
    benchmark's own (``own``, and its bookkeeping) taken out."""
    by_name: Counter[str] = Counter()
    for name, values in after.items():
        command = name.removeprefix("cmdstat_")
        if command.split("|")[0] in BOOKKEEPING:
            continue
        calls = int(values["calls"]) - int(before.get(name, {}).get("calls", 0))
        calls -= own.get(command, 0)
        if calls > 0:
            by_name[command] = calls
    scripts = sum(calls for name, calls in by_name.items() if name in SCRIPTS)
    return sum(by_name.values()), scripts, by_name


def own_commands(sampler: Sampler | None) -> Counter[str]:
    """The commands a sampler sent, by name."""
    if sampler is None:
        return Counter()
    return Counter(dict.fromkeys(sampler.read_commands, sampler.reads))


__all__ = ["Sampler", "commands", "own_commands"]
