"""Moved to ``ratekeeper.core.store_keys``; ``descriptor_key`` also imports from
``ratekeeper.engine``. This path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.core.store_keys import KEY_LAYOUT as VERSION
from ratekeeper.core.store_keys import (
    MAX_IDENTITY,
    TAGS,
    bounded,
    check_prefix,
    check_tag,
    descriptor_entries,
    descriptor_key,
    escape,
    identity,
    limit_tag,
    state_key,
)

__all__ = [
    "MAX_IDENTITY",
    "TAGS",
    "VERSION",
    "bounded",
    "check_prefix",
    "check_tag",
    "descriptor_entries",
    "descriptor_key",
    "escape",
    "identity",
    "limit_tag",
    "state_key",
]

moved(__name__, "ratekeeper.core.store_keys")
