"""Every exception ratekeeper raises.

RatekeeperError
 ├── InvalidLimitError (also ValueError)   a bad rate string or limit parameter
 ├── InvalidInputError (also ValueError)   a bad key or cost passed to a decision
 ├── RateLimitExceeded                      a decorated call or acquire() was refused
 ├── StoreError                             a request store failed (down, timed out, erred)
 ├── StoreConfigError (also ValueError)     a request store is misconfigured: a bad URL, bad
 │                                          credentials, an unknown database
 ├── ConfigError (also ValueError)          a rule file or limit override is invalid
 ├── ConfigStoreError                       the configuration store failed
 ├── TraceError (also ValueError)           a simulation's trace is malformed
 └── MissingExtraError (also ImportError)   an optional dependency is not installed

Caller errors (``InvalidLimitError``, ``InvalidInputError``) and misconfiguration
(``StoreConfigError``) are always raised to the caller. Only ``StoreError`` is a store failure:
it alone counts toward a store's circuit breaker and is answered by the ``on_store_error``
policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ratekeeper.core.decisions import Decision


class RatekeeperError(Exception):
    """Base class of every ratekeeper exception."""


class InvalidLimitError(RatekeeperError, ValueError):
    """A rate string or limit parameter is invalid; the message names the bad part."""


class InvalidInputError(RatekeeperError, ValueError):
    """A key or cost passed to a decision is invalid; the message names the value.

    Nothing is counted and no state changes: see ``ratekeeper.core.inputs`` for what is valid.
    """


class RateLimitExceeded(RatekeeperError):
    """A call was refused by a limit.

    ``decision`` is the refusing decision; ``retry_after`` is how many seconds to wait before a
    retry could succeed.
    """

    def __init__(self, decision: Decision, key: str = "") -> None:
        # The message is formatted only when read: a refused call that is caught and
        # dropped (a decorated function under load) does not pay for it.
        super().__init__(decision, key)
        self.decision = decision
        self.key = key
        self.retry_after = decision.retry_after

    def __str__(self) -> str:
        decision, key = self.decision, self.key
        where = f" for {key!r}" if key else ""
        return (
            f"rate limit of {decision.limit} exceeded{where}; "
            f"retry after {decision.retry_after:.3f}s"
        )


class StoreError(RatekeeperError):
    """A request store could not answer."""


class StoreConfigError(RatekeeperError, ValueError):
    """A request store is misconfigured: a bad URL, bad credentials, an unknown database.

    Raised when the store is opened or first used, never answered by the failure policy: a
    limiter that cannot reach its store because of its own configuration must say so, not
    quietly admit everything.
    """


class ConfigError(RatekeeperError, ValueError):
    """A rule file or a limit override is invalid.

    ``errors`` holds every problem found, each a message that starts with the file name and the
    path inside the file (``rules.yaml: descriptors[0].rate_limit.unit: ...``); the exception's
    own message joins them, one per line.
    """

    def __init__(self, errors: str | list[str]) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


class ConfigStoreError(RatekeeperError):
    """The configuration store could not answer or could not make a change durable."""


class MissingExtraError(RatekeeperError, ImportError):
    """An optional part of ratekeeper needs a package that is not installed."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package} is not installed; install it with: pip install 'ratekeeper[{extra}]'"
        )


class TraceError(RatekeeperError, ValueError):
    """A trace to simulate is malformed: a bad line of a trace file (its message names the line)
    or bad generator parameters."""
