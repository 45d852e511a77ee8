"""``RedisStore``: the request store on a Redis, Sentinel or Cluster client (see the package).

``AsyncRedisStore`` (``async_store.py``) is its twin: only I/O differs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

from ratekeeper.algorithms.leases import Taken
from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import (
    MissingExtraError,
    StoreConfigError,
)
from ratekeeper.core.inputs import check_hits, check_key
from ratekeeper.core.limits import Limit
from ratekeeper.core.store_keys import state_key
from ratekeeper.stores.contract import Admitted, Health, Hit, LeaseTerms
from ratekeeper.stores.redis.base import SLICES, Base
from ratekeeper.stores.redis.batches import (
    Batch,
    Ran,
    Refund,
    admitted,
    gather,
    refunds_of,
    settle,
    unrefunded,
)
from ratekeeper.stores.redis.errors import ERRORS, failure, missing_from
from ratekeeper.stores.redis.scripts import (
    LIBRARY,
    decision,
    decisions_at,
    released,
    taken,
)

try:
    import redis.cluster
    from redis.exceptions import NoPermissionError, NoScriptError, ResponseError
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("redis", "redis") from error


class RedisStore(Base):
    """Request store on a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client.

    ``prefix`` starts every key; ``tag`` is ``"limit"`` (a slot per limit and identity) or
    ``"identity"`` (a slot per identity). Errors from Redis are raised as ``StoreError``; wrap
    the store in ``ratekeeper.stores.wrappers.resilience.Resilient`` for a failure policy.
    """

    _cluster = redis.cluster.RedisCluster

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        """Apply one hit atomically; see ``ratekeeper.stores.Store``."""
        name, args = self._single(key, limit, cost, now)
        try:
            try:
                reply = self._execute(self._call, name, 1, *args, **self._raw)
            except ResponseError as error:  # a restarted or failed-over server: load, once
                if not self._reload(error, self._scripts[limit.algorithm]):
                    raise
                name = self._singles[limit.algorithm]
                reply = self._execute(self._call, name, 1, *args, **self._raw)
        except ERRORS as error:
            raise failure(error) from error
        return decision(reply)

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        """Apply a batch: one script run (one round trip) per slot; with ``all_or_nothing``
        over several slots, refunds when one refused (see the module's docstring)."""
        hits = check_hits(hits)
        batches = self._batches(hits, now, all_or_nothing)
        if all_or_nothing and len(batches) > 1:
            return self._apply_across(hits, batches)[0]
        try:
            if len(batches) == 1:
                replies = [self._run(batches[0][1], batches[0][2])]
            else:  # only a cluster splits a batch; its pipeline refuses scripts: one run a slot
                replies = [self._run(keys, argv) for _, keys, argv in batches]
        except ERRORS as error:
            raise failure(error) from error
        return gather(len(hits), batches, replies)

    def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        """``apply_many`` on the server's clock, each decision with the time its script ran at,
        for a ``refund``; see ``ratekeeper.stores.Store``."""
        hits = check_hits(hits)
        batches = self._batches(hits, None, all_or_nothing, timed=True)
        if all_or_nothing and len(batches) > 1:
            results, ran = self._apply_across(hits, batches)
            return admitted(len(hits), ran, results)
        done: list[Ran] = []
        for batch in batches:  # a cluster's pipeline refuses scripts: one run a slot
            try:
                done.append((batch, *decisions_at(self._run(batch[1], batch[2]))))
            except ERRORS as error:
                raise self._failure_of(batch[1], error) from error
        return admitted(len(hits), done)

    def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        """Give back ``cost`` units granted at ``at`` (the server's time its ``Admitted``
        reported) in one script run; see ``MemoryStore.refund``. ``StoreError`` when Redis
        fails."""
        found = self._refund_args(key, limit, cost, at)
        if found is None:
            return
        keys, argv = found
        try:
            self._refund_script(keys, argv)
        except ERRORS as error:
            raise self._failure_of(keys, error) from error

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        """Release up to ``slots`` slots of ``key`` under the concurrency ``limit``, the
        earliest-expiring first; the decision's ``granted`` is the number released and its
        ``remaining`` the free slots. ``InvalidLimitError`` for another algorithm,
        ``InvalidInputError`` for ``slots`` below 1; ``StoreError`` when Redis fails."""
        args = self._release_args(key, limit, slots, now)
        script = self._release_script
        try:
            try:
                reply = self._execute("EVALSHA", script.sha, 1, *args)
            except NoScriptError:
                self.client.script_load(script.script)
                reply = self._execute("EVALSHA", script.sha, 1, *args)
        except ERRORS as error:
            raise failure(error) from error
        return released(reply)

    def lease(self, key: str, limit: Limit, want: int, **terms: Unpack[LeaseTerms]) -> Taken:
        """Exchange a slice of a leased limit's budget in one script run; see
        ``ratekeeper.stores.contract.LeasingStore``. ``StoreError`` when Redis fails."""
        script, keys, argv = self._lease_args(key, limit, want, terms)
        try:
            try:
                reply = self._execute("EVALSHA", script.sha, 2, *keys, *argv, **self._raw)
            except NoScriptError:
                self.client.script_load(script.script)
                reply = self._execute("EVALSHA", script.sha, 2, *keys, *argv, **self._raw)
        except ERRORS as error:
            raise self._failure_of(keys, error) from error
        one, at = taken(reply)
        return Taken(one.granted, one, at)

    def _run(self, keys: list[str], argv: list[str]) -> Any:
        """One run of the batch entry, its reply as bytes (reloaded when missing)."""
        try:
            return self._execute(self._call, self._batch, len(keys), *keys, *argv, **self._raw)
        except ResponseError as error:
            if not self._reload(error, self._script):
                raise
            return self._execute(self._call, self._batch, len(keys), *keys, *argv, **self._raw)

    def _reload(self, error: ResponseError, script: Any) -> bool:
        """Load what ``error`` says the server is missing, and tell whether to call again
        (``missing_from``): the library, or ``script`` (after falling back to scripts)."""
        missing = missing_from(error)
        if missing == "library":
            try:
                self.client.function_load(LIBRARY, replace=True)
                return True
            except NoPermissionError:
                missing = "functions"
        if missing == "functions":
            self._use_functions(False)
        elif missing != "script":
            return False
        self.client.script_load(script.script)
        return True

    def _apply_across(
        self, hits: Sequence[Hit], batches: list[Batch]
    ) -> tuple[list[Decision], list[Ran]]:
        """all_or_nothing over several slots: each slot's part, one after another, then the
        refunds if one refused (or raised); the decisions, and each part as it ran."""
        ran: list[Ran] = []
        for batch in batches:
            try:
                ran.append((batch, *decisions_at(self._run(batch[1], batch[2]))))
            except ERRORS as error:
                self._refund(refunds_of(hits, ran))
                raise self._failure_of(batch[1], error) from error
        results, refunds = settle(hits, ran)
        self._refund(refunds)
        return results, ran

    def _refund(self, refunds: list[Refund]) -> None:
        for keys, argv in refunds:
            try:
                self._refund_script(keys, argv)
            except ERRORS as error:
                unrefunded(keys, error)

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()

    def reset(self, key: str, limit: Limit) -> None:
        """Delete ``limit``'s state for ``key``."""
        key = check_key(key)
        try:
            state = state_key(limit, key, self.prefix, self.tag)
            self.client.delete(state, state + SLICES)
        except ERRORS as error:
            raise failure(error) from error

    def ping(self) -> Health:
        """Whether Redis answers now; raises ``StoreConfigError`` when it is misconfigured."""
        try:
            self.client.ping()
        except ERRORS as error:
            mapped = failure(error)
            if isinstance(mapped, StoreConfigError):
                raise mapped from error
            return Health(False, error=str(mapped))
        return Health(True)
