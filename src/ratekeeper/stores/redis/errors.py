"""Errors at the Redis boundary: what redis-py raises, sorted into ratekeeper's (``failure``),
and what a call's error says the server is missing (``missing_from``)."""

from __future__ import annotations

from ratekeeper.core.errors import (
    InvalidInputError,
    MissingExtraError,
    StoreConfigError,
    StoreError,
)

try:
    import redis
    from redis.exceptions import (
        AuthenticationError,
        AuthenticationWrongNumberOfArgsError,
        ClusterDownError,
        MasterDownError,
        NoPermissionError,
        NoScriptError,
        RedisClusterException,
        ResponseError,
    )
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("redis", "redis") from error


#: What redis-py raises when a call fails; sorted by ``failure`` at this boundary.
ERRORS = (redis.RedisError, RedisClusterException, OSError)

#: What it raises when a call timed out.
TIMEOUTS = (redis.TimeoutError, TimeoutError)


_MISCONFIGURED = (AuthenticationError, AuthenticationWrongNumberOfArgsError, NoPermissionError)
#: Errors that say the store's own configuration is wrong: an unknown database, a cluster URL
#: for a server that is not in cluster mode.
_MISCONFIGURED_REPLIES = (
    "DB index is out of range",
    "invalid DB index",
    "Cluster mode is not enabled",
)


#: What a CLUSTERDOWN reply means: not this shard's failure, but the whole cluster's refusal
#: (``coverage``).
CLUSTER_DOWN = (
    "the cluster refuses every key (CLUSTERDOWN), not only a failing shard's: a master is "
    "failing over and cluster-require-full-coverage is yes"
)


def failure(error: BaseException) -> Exception:
    """The ratekeeper exception for an error redis-py raised (see the module docstring)."""
    message = str(error)
    if isinstance(error, _MISCONFIGURED) or (
        isinstance(error, ResponseError | RedisClusterException)
        and any(reply in message for reply in _MISCONFIGURED_REPLIES)
    ):
        return StoreConfigError(f"redis is misconfigured: {message}")
    if isinstance(error, ResponseError) and message.startswith("ratekeeper: invalid"):
        return InvalidInputError(message.removeprefix("ratekeeper: "))
    if isinstance(error, ClusterDownError) and not isinstance(error, MasterDownError):
        return StoreError(f"redis: {CLUSTER_DOWN} ({message})")
    return StoreError(f"redis: {message}")


#: What asyncio raises when redis-py writes on a connection that was closed meanwhile.
_CLOSED_TRANSPORT = "the handler is closed"


def client_fault(error: BaseException) -> StoreError | None:
    """A ``StoreError`` for what redis-py's asyncio cluster client lets out when it loses a
    connection while it reconnects after a node's failure: an ``AttributeError`` raised inside
    redis-py itself (a connection's writer dropped while another call is connecting on it), or
    asyncio's ``RuntimeError`` for a write on a transport closed meanwhile. None for any other
    error, which stays a bug."""
    if isinstance(error, RuntimeError):
        if _CLOSED_TRANSPORT not in str(error):
            return None
    elif isinstance(error, AttributeError):
        trace = error.__traceback__
        while trace is not None and trace.tb_next is not None:
            trace = trace.tb_next
        module = "" if trace is None else str(trace.tb_frame.f_globals.get("__name__", ""))
        if not module.startswith("redis."):
            return None
    else:
        return None
    mapped = StoreError(f"redis: the client lost a connection during the call ({error})")
    mapped.__cause__ = error
    return mapped


class ShardError(StoreError):
    """A failure of one shard of a cluster: ``shard`` names it (its master's ``host:port``), so
    that a failure policy counts it against that shard alone."""

    def __init__(self, message: str, shard: str) -> None:
        super().__init__(message)
        self.shard = shard


def missing_from(error: ResponseError) -> str | None:
    """What a call's error says the server is missing: ``"script"`` (NOSCRIPT: a restarted or
    failed-over server, or ``SCRIPT FLUSH``), ``"library"`` (no such function: the same, or
    ``FUNCTION FLUSH``), ``"functions"`` (a server older than Redis 7, or a user not allowed to
    call functions: the scripts serve instead); None for any other error."""
    if isinstance(error, NoScriptError):
        return "script"
    message = str(error).lower()
    if message.startswith("function not found"):
        return "library"
    if "fcall" in message and (
        "unknown command" in message or isinstance(error, NoPermissionError)
    ):
        return "functions"
    return None
