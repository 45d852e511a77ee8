"""What a Redis Cluster's setting ``cluster-require-full-coverage`` means for a limiter, read
where the server allows it (``CONFIG GET`` on each master).

With ``yes``, Redis's default, every node refuses every key (``CLUSTERDOWN``) while any slot is
not served: from the moment a failed master is marked failed until its replica is promoted,
the keys of the healthy masters are refused too, and a limiter can keep none of them exact.
With ``no``, the healthy masters go on answering for their own slots. ``warning`` says so in
one line when a master has ``yes``; ``failure`` (``errors``) names a ``CLUSTERDOWN`` as the
cluster's refusal, not a shard's failure.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ratekeeper.stores.redis.fleet import TIMEOUT, on_master

log = logging.getLogger("ratekeeper.store")

SETTING = "cluster-require-full-coverage"
#: Seconds between two readings of the setting: it changes seldom, and a ping may be frequent.
EVERY = 60.0


def _value(reply: Any) -> str | None:
    """The setting's value in a ``CONFIG GET`` reply (a dict, of str or bytes)."""
    if not isinstance(reply, dict):
        return None
    for key, value in reply.items():
        if (key.decode() if isinstance(key, bytes) else str(key)) == SETTING:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


async def full_coverage(client: Any) -> dict[str, str | None]:
    """The setting on each master the client knows, by ``host:port``; None where the master did
    not say (``CONFIG`` renamed or not allowed, or no answer)."""

    async def one(node: Any) -> str | None:
        try:
            reply = await on_master(client, node, TIMEOUT, "CONFIG GET", SETTING)
        except Exception as error:  # any refusal: the setting stays unknown
            log.debug("could not read %s on %s: %s", SETTING, node.name, error)
            return None
        return _value(reply)

    nodes = list(client.get_primaries())
    values = await asyncio.gather(*(one(node) for node in nodes))
    return {node.name: value for node, value in zip(nodes, values, strict=True)}


def warning(found: dict[str, str | None]) -> str | None:
    """One line for the operator when a master requires full coverage; None otherwise."""
    strict = sorted(name for name, value in found.items() if value == "yes")
    if not strict:
        return None
    return (
        f"{SETTING} is yes on {len(strict)} of {len(found)} masters ({', '.join(strict)}): "
        "while one master fails over, the cluster refuses every key on every master "
        "(CLUSTERDOWN) and every decision is degraded; set it to no on every node "
        f"(CONFIG SET {SETTING} no, and in its configuration file) so that only the failing "
        "master's keys are"
    )


class Watch:
    """The setting's warning, read at most every ``EVERY`` seconds (``check``)."""

    def __init__(self) -> None:
        self.read_at: float | None = None
        self.warning: str | None = None

    async def check(self, client: Any) -> str | None:
        now = asyncio.get_running_loop().time()
        if self.read_at is None or now - self.read_at >= EVERY:
            self.read_at = now
            self.warning = warning(await full_coverage(client))
        return self.warning
