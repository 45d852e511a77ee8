"""Moved to ``ratekeeper.stores.redis.clients``; this path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.stores.redis.clients import DEFAULT_TIMEOUT, check_url, open_client, split_timeout

__all__ = ["DEFAULT_TIMEOUT", "check_url", "open_client", "split_timeout"]

moved(__name__, "ratekeeper.stores.redis.clients")
