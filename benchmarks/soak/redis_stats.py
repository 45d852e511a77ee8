"""What the soak reads from its Redis: memory, key count, and keys without a TTL."""

from __future__ import annotations

from dataclasses import dataclass

import redis


@dataclass(frozen=True)
class TtlScan:
    """Every key scanned at the end: how many, and how many have no TTL (``TTL`` is -1)."""

    keys: int
    without_ttl: int
    examples: tuple[str, ...]


def memory(client: redis.Redis) -> tuple[float, int]:
    """Redis ``used_memory`` in MB, and ``DBSIZE``."""
    used = int(client.info("memory")["used_memory"])
    return used / 2**20, int(client.dbsize())


def scan_ttls(client: redis.Redis, batch: int = 1000) -> TtlScan:
    """SCAN every key and ask each one's TTL, ``batch`` at a time in a pipeline."""
    keys = without = 0
    examples: list[str] = []
    cursor = 0
    while True:
        cursor, names = client.scan(cursor, count=batch)
        if names:
            pipe = client.pipeline(transaction=False)
            for name in names:
                pipe.ttl(name)
            for name, ttl in zip(names, pipe.execute(), strict=True):
                keys += 1
                if ttl == -1:
                    without += 1
                    if len(examples) < 5:
                        text = name if isinstance(name, str) else name.decode("utf-8", "replace")
                        examples.append(text)
        if cursor == 0:
            return TtlScan(keys, without, tuple(examples))
