"""ratekeeper: exact, fast rate limiting.

The public surface is what ``__all__`` lists; everything else is internal.
"""

from ratekeeper.algorithms import Algorithm
from ratekeeper.decision import Decision
from ratekeeper.errors import (
    ConfigError,
    ConfigStoreError,
    InvalidLimitError,
    MissingExtraError,
    RatekeeperError,
    RateLimitExceeded,
    StoreError,
)
from ratekeeper.limit import Limit
from ratekeeper.limiter import AsyncLimiter, Limiter
from ratekeeper.rates import parse, parse_many, parse_period
from ratekeeper.stores import AsyncStore, Store, open_async_store, open_store
from ratekeeper.stores.memory import AsyncMemoryStore, MemoryStore

__all__ = [
    "Algorithm",
    "AsyncLimiter",
    "AsyncMemoryStore",
    "AsyncStore",
    "ConfigError",
    "ConfigStoreError",
    "Decision",
    "InvalidLimitError",
    "Limit",
    "Limiter",
    "MemoryStore",
    "MissingExtraError",
    "RateLimitExceeded",
    "RatekeeperError",
    "Store",
    "StoreError",
    "open_async_store",
    "open_store",
    "parse",
    "parse_many",
    "parse_period",
]

__version__ = "0.1.0"
