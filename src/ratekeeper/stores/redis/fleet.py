"""The fleet's roll call on Redis: each process sharing the store writes its name into a sorted
set with the time its entry expires (the server's clock), drops the entries that expired, and
reads how many are left, in one script run (``HEARTBEAT``).

On one server the roll is one key, ``<prefix>:fleet``. On a Redis Cluster it is one key per
master (``roll_keys``), each the same roll, so that a master that fails leaves the others'
counts readable: the count is the largest any master answered (``count``). Each master is
called straight, on its own connections, not through the cluster client's routing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from redis.crc import key_slot

from ratekeeper.core.errors import StoreError
from ratekeeper.stores.redis.errors import ERRORS, client_fault, failure

#: KEYS[1] the roll; ARGV the member and its time to live in seconds: the member's entry
#: renewed, the expired ones dropped, the roll's size returned. The key itself expires when
#: nobody renews it.
HEARTBEAT = """
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl * 2000))
return redis.call('ZCARD', KEYS[1])
"""

#: Seconds a roll call waits for each master: it runs beside the decisions, never in their way,
#: so it may wait for an event loop that is behind.
TIMEOUT = 2.0

#: The hash tags tried, in order, to find a key on each master of a cluster.
_CANDIDATES = 1024


def roll_key(prefix: str, tag: int | None = None) -> str:
    """The roll's key: ``<prefix>:fleet``, or on a cluster ``<prefix>:fleet:{<tag>}``."""
    return f"{prefix}:fleet" if tag is None else f"{prefix}:fleet:{{{tag}}}"


def roll_keys(
    client: Any, prefix: str, owner: Callable[[int], str] | None
) -> list[tuple[Any, str]]:
    """Where the roll is kept: ``(None, key)`` on one server (``owner`` None); on a cluster,
    each master the client's slot map knows now with a key it serves: the first candidate
    tag whose slot ``owner`` (the store's ``_owner``) names that master."""
    if owner is None:
        return [(None, roll_key(prefix))]
    masters = {node.name: node for node in client.get_primaries()}
    found: dict[str, tuple[Any, str]] = {}
    for tag in range(_CANDIDATES):
        key = roll_key(prefix, tag)
        name = owner(key_slot(key.encode()))
        if name in masters and name not in found:
            found[name] = (masters[name], key)
            if len(found) == len(masters):
                break
    return list(found.values())


async def on_master(client: Any, node: Any, timeout: float, *command: Any) -> Any:
    """``command`` on one server, or on one cluster master straight: not through the cluster
    client, whose slot map a failing master makes it refresh, failing the calls in flight."""
    target = client if node is None else node
    async with asyncio.timeout(timeout):
        return await target.execute_command(*command)


async def count(
    client: Any, where: list[tuple[Any, str]], member: str, ttl: float, timeout: float = TIMEOUT
) -> int:
    """Renew ``member`` on the roll wherever it is kept and return the largest count any copy
    gave; the ``StoreError`` of the first failure when none answered."""

    async def one(node: Any, key: str) -> int:
        return int(await on_master(client, node, timeout, "EVAL", HEARTBEAT, 1, key, member, ttl))

    answers = await asyncio.gather(*(one(node, key) for node, key in where), return_exceptions=True)
    counted = [answer for answer in answers if isinstance(answer, int)]
    if counted:
        return max(counted)
    if not answers:
        raise StoreError("redis: the cluster client knows no master yet")
    error = answers[0]
    if isinstance(error, ERRORS):
        raise failure(error) from error
    assert isinstance(error, BaseException)
    raise client_fault(error) or error


async def leave(
    client: Any, where: list[tuple[Any, str]], member: str, timeout: float = TIMEOUT
) -> None:
    """Take ``member`` off every copy of the roll, as far as the store answers (a member that
    could not leave expires with its time to live)."""
    await asyncio.gather(
        *(on_master(client, node, timeout, "ZREM", key, member) for node, key in where),
        return_exceptions=True,
    )
