"""ratekeeper: exact, fast rate limiting.

The public surface is what ``__all__`` lists; everything else is internal.
"""

from ratekeeper.algorithms import Algorithm
from ratekeeper.client import AsyncRemoteLimiter, RemoteLimiter
from ratekeeper.config import ConfigStore, open_config_store
from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import (
    ConfigError,
    ConfigStoreError,
    InvalidInputError,
    InvalidLimitError,
    MissingExtraError,
    RatekeeperError,
    RateLimitExceeded,
    StoreConfigError,
    StoreError,
)
from ratekeeper.core.limits import Limit
from ratekeeper.core.overrides import Override
from ratekeeper.core.periods import parse_period
from ratekeeper.core.rates import parse, parse_many
from ratekeeper.core.version import VERSION as __version__  # noqa: F401 (ratekeeper.__version__)
from ratekeeper.decider import AsyncDecider, Decider
from ratekeeper.engine import AsyncEngine, Descriptor, Engine, Status, Verdict
from ratekeeper.limiter import AsyncLimiter, Limiter
from ratekeeper.rules import Rule, RuleSet, load_rules, parse_rules
from ratekeeper.stores import AsyncStore, Health, Store, open_async_store, open_store
from ratekeeper.stores.memory import AsyncMemoryStore, MemoryStore

__all__ = [
    "Algorithm",
    "AsyncDecider",
    "AsyncEngine",
    "AsyncLimiter",
    "AsyncMemoryStore",
    "AsyncRemoteLimiter",
    "AsyncStore",
    "ConfigError",
    "ConfigStore",
    "ConfigStoreError",
    "Decider",
    "Decision",
    "Descriptor",
    "Engine",
    "Health",
    "InvalidInputError",
    "InvalidLimitError",
    "Limit",
    "Limiter",
    "MemoryStore",
    "MissingExtraError",
    "Override",
    "RateLimitExceeded",
    "RatekeeperError",
    "RemoteLimiter",
    "Rule",
    "RuleSet",
    "Status",
    "Store",
    "StoreConfigError",
    "StoreError",
    "Verdict",
    "load_rules",
    "open_async_store",
    "open_config_store",
    "open_store",
    "parse",
    "parse_many",
    "parse_period",
    "parse_rules",
]
