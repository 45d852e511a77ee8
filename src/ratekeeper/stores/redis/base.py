"""What the Redis twins share: the client, the key layout and the script arguments (no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratekeeper.core.errors import MissingExtraError, StoreError
from ratekeeper.core.inputs import MAX_COST, check_hit, check_key, check_now
from ratekeeper.core.limits import Limit
from ratekeeper.core.store_keys import check_prefix, check_tag, state_key
from ratekeeper.stores.contract import Hit, LeaseTerms, check_lease, check_release
from ratekeeper.stores.redis.batches import Batch
from ratekeeper.stores.redis.errors import ShardError, failure
from ratekeeper.stores.redis.scripts import (
    FUNCTIONS,
    LEASE,
    REFUND,
    RELEASE,
    SINGLE,
    SOURCE,
    arguments,
    lease_args,
    limit_args,
    now_arg,
)

try:
    from redis.client import NEVER_DECODE
    from redis.crc import key_slot
    from redis.exceptions import SlotNotCoveredError
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("redis", "redis") from error


#: What the key of a state's slices adds to the state's key (the same cluster slot).
SLICES = ":s"

#: The option that has a client which decodes its replies read a script's reply as bytes.
_RAW = {NEVER_DECODE: True}


class Base:
    """What the twins share: the client, the key layout and the script arguments (no I/O)."""

    _cluster: type

    def __init__(self, client: Any, *, prefix: str = "rk", tag: str = "limit") -> None:
        check_prefix(prefix)
        check_tag(tag)
        self.client = client
        self.prefix = prefix
        self.tag = tag
        self.clustered = isinstance(client, self._cluster)
        #: Whether the store is made of shards, each with its own failures (``shard_of``).
        self.sharded = self.clustered
        self._script = client.register_script(SOURCE)
        self._scripts = {
            algorithm: client.register_script(source) for algorithm, source in SINGLE.items()
        }
        self._refund_script = client.register_script(REFUND)
        self._release_script = client.register_script(RELEASE)
        self._lease_scripts = {
            algorithm: client.register_script(source) for algorithm, source in LEASE.items()
        }
        self._execute = client.execute_command
        # Script replies are packed decisions: read as bytes even by a client that decodes.
        self._raw = _RAW if client.get_encoder().decode_responses else {}
        self._use_functions(not self.clustered)

    def shard_of(self, key: str, limit: Limit) -> str:
        """The shard that holds ``key``'s state under ``limit``: on a cluster, the node that
        owns its slot in the client's slot map as it is now (its ``host:port``, which a
        failover changes as soon as the client refreshes its map); ``""`` on one server, for a
        bad key, or when no node covers the slot."""
        if not self.clustered:
            return ""
        try:
            name = state_key(limit, key, self.prefix, self.tag)
            return self._owner(key_slot(name.encode()))
        except (AttributeError, TypeError, UnicodeError):  # a bad key: the call will say so
            return ""

    def _owner(self, slot: int) -> str:
        """The name of the node that serves ``slot`` now; ``""`` when none does."""
        try:
            return str(self.client.nodes_manager.get_node_from_slot(slot).name)
        except (SlotNotCoveredError, LookupError, TypeError, AttributeError):
            return ""

    def _failure_of(self, keys: list[str], error: BaseException) -> Exception:
        """``failure(error)`` of the script run on ``keys`` (one slot's), naming its shard."""
        mapped = failure(error)
        if type(mapped) is StoreError and self.clustered:
            shard = ShardError(str(mapped), self._owner(key_slot(keys[0].encode())))
            shard.__cause__ = error
            return shard
        return mapped

    def _use_functions(self, on: bool) -> None:
        """From now on, send ``apply`` and batches to the function library (``FCALL``), or to
        the scripts (``EVALSHA``): ``_call`` is the command, ``_singles[algorithm]`` and
        ``_batch`` what it names.

        A cluster is sent the scripts: redis-py asks a cluster node for the keys of every
        ``FCALL`` (a ``COMMAND GETKEYS`` round trip), where it reads an ``EVALSHA``'s itself.
        """
        self._call = "FCALL" if on else "EVALSHA"
        if on:
            self._singles = {algorithm: FUNCTIONS[algorithm] for algorithm in self._scripts}
            self._batch = FUNCTIONS["batch"]
        else:
            self._singles = {algorithm: script.sha for algorithm, script in self._scripts.items()}
            self._batch = self._script.sha

    def _single(
        self, key: str, limit: Limit, cost: int, now: float | None
    ) -> tuple[str, tuple[Any, ...]]:
        """What ``_call`` names for ``limit``'s single-hit entry, and its arguments."""
        if key.__class__ is not str or cost.__class__ is not int or not 0 <= cost <= MAX_COST:
            key, cost = check_hit(key, cost)
        elif not key.isascii() or not key:
            key = check_key(key)
        args = (
            state_key(limit, key, self.prefix, self.tag),
            now_arg(now),
            str(cost),
            *limit_args(limit),
        )
        return self._singles[limit.algorithm], args

    def _batches(
        self, hits: Sequence[Hit], now: float | None, all_or_nothing: bool, timed: bool = False
    ) -> list[Batch]:
        """Split a batch of checked hits (``check_hits``) into one script run per cluster slot:
        ``(indexes, keys, argv)`` each; with ``all_or_nothing`` over several slots, or
        ``timed`` (``admit``), each run's reply also carries its ``now``."""
        prefix, tag = self.prefix, self.tag
        keys = [state_key(limit, key, prefix, tag) for key, limit, _ in hits]
        if not self.clustered:  # one server: one run
            argv = arguments(
                [(limit, cost) for _, limit, cost in hits], now, all_or_nothing, with_now=timed
            )
            return [(range(len(hits)), keys, argv)]  # gather does not read a lone batch's indexes
        groups: dict[int, list[int]] = {}
        for index, key in enumerate(keys):
            groups.setdefault(key_slot(key.encode()), []).append(index)
        # refunds need each slot's time
        with_now = timed or (all_or_nothing and len(groups) > 1)
        return [
            (
                indexes,
                [keys[i] for i in indexes],
                arguments(
                    [(hits[i][1], hits[i][2]) for i in indexes],
                    now,
                    all_or_nothing,
                    with_now=with_now,
                ),
            )
            for indexes in groups.values()
        ]

    def _refund_args(
        self, key: str, limit: Limit, cost: int, at: float
    ) -> tuple[list[str], list[str]] | None:
        """The refund script's keys and ARGV for ``cost`` units granted at ``at``, checked as
        ``MemoryStore.refund`` checks them; None when there is nothing to refund."""
        key, cost = check_hit(key, cost)
        at = check_now(at)
        if not cost:
            return None
        keys = [state_key(limit, key, self.prefix, self.tag)]
        return keys, arguments([(limit, cost)], at, False)

    def _release_args(
        self, key: str, limit: Limit, slots: int, now: float | None
    ) -> tuple[Any, ...]:
        """The release script's arguments, checked as ``MemoryStore.release`` checks them."""
        key, slots = check_key(key), check_release(limit, slots)
        return (
            state_key(limit, key, self.prefix, self.tag),
            now_arg(now),
            str(slots),
            *limit_args(limit),
        )

    def _lease_args(
        self, key: str, limit: Limit, want: int, terms: LeaseTerms
    ) -> tuple[Any, list[str], list[str]]:
        """The lease script of ``limit``, its keys (the state's and its slices') and its ARGV,
        checked as ``MemoryStore.lease`` checks them (``check_lease``)."""
        ask = check_lease(key, limit, want, terms)
        state = state_key(limit, ask.key, self.prefix, self.tag)
        return self._lease_scripts[limit.algorithm], [state, state + SLICES], lease_args(ask)
