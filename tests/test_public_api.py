"""The public surface is what ``ratekeeper.__all__`` says, and the twins stay twins."""

from __future__ import annotations

import importlib
import inspect

import pytest

import ratekeeper
from ratekeeper import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore

PUBLIC = [
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


#: Each package's public names, which import from where they always have: a package's
#: ``__all__`` and the paths the docs teach.
PACKAGES = {
    "ratekeeper.web": [
        "AsyncGate",
        "Gate",
        "GateDecision",
        "HandlerResult",
        "Key",
        "RateLimit",
        "Replies",
        "Reply",
        "Request",
        "keys",
    ],
    "ratekeeper.web.asgi": ["RateLimitMiddleware"],
    "ratekeeper.web.wsgi": ["RateLimitMiddleware"],
    "ratekeeper.web.fastapi": ["RateLimited", "RateLimiter", "problem_handler"],
    "ratekeeper.web.flask": ["RateLimiter", "request_of"],
    "ratekeeper.web.django": ["RateLimitMiddleware", "RateLimiter", "request_of"],
    "ratekeeper.simulate": [
        "Delays",
        "Event",
        "LimitLike",
        "Measures",
        "Retry",
        "Simulation",
        "Trace",
        "parse_limit",
        "simulate",
    ],
    "ratekeeper.service.observe.metrics": ["Metrics"],
    "ratekeeper.testing": ["FakeClock"],
    "ratekeeper.stores": ["AsyncStore", "Health", "Hit", "Store", "open_async_store", "open_store"],
    "ratekeeper.stores.memory": ["AsyncMemoryStore", "MemoryStore"],
    "ratekeeper.stores.redis": ["AsyncRedisStore", "RedisStore"],
    "ratekeeper.engine": [
        "UNLIMITED",
        "AsyncEngine",
        "Descriptor",
        "Engine",
        "Status",
        "Verdict",
        "descriptor_key",
    ],
    "ratekeeper.rules": ["Rule", "RuleSet", "load_rules", "parse_rules"],
    "ratekeeper.config": ["ConfigStore", "open_config_store", "redacted"],
    "ratekeeper.cli": ["main"],
}


@pytest.mark.parametrize(("package", "names"), PACKAGES.items())
def test_public_names_import_from_where_they_always_have(package: str, names: list[str]) -> None:
    module = importlib.import_module(package)
    for name in names:
        assert hasattr(module, name), f"{package}.{name}"
    declared = getattr(module, "__all__", None)
    if declared is not None:
        assert set(names) <= set(declared)


def test_all_is_exactly_the_public_surface_and_sorted() -> None:
    assert ratekeeper.__all__ == PUBLIC
    assert sorted(ratekeeper.__all__) == ratekeeper.__all__
    for name in ratekeeper.__all__:
        assert hasattr(ratekeeper, name), name


def test_nothing_else_public_leaks_from_the_package() -> None:
    exported = {
        name
        for name, value in vars(ratekeeper).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert exported == set(PUBLIC)


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member)
    }


def test_limiter_twins_expose_the_same_methods() -> None:
    sync, both = _public_methods(Limiter), _public_methods(AsyncLimiter)
    assert sync.keys() == both.keys()
    for name, signature in sync.items():
        assert list(signature.parameters) == list(both[name].parameters), name


def test_async_limiter_methods_are_awaitable_where_the_sync_ones_do_io() -> None:
    for name in ("hit", "peek", "reset", "hit_many", "acquire", "close"):
        assert inspect.iscoroutinefunction(getattr(AsyncLimiter, name)), name


def test_memory_store_twins_expose_the_same_methods() -> None:
    shared = {"apply", "apply_many", "reset", "clear", "close"}
    assert shared <= _public_methods(MemoryStore).keys()
    assert shared <= _public_methods(AsyncMemoryStore).keys()
    for name in shared:
        assert inspect.iscoroutinefunction(getattr(AsyncMemoryStore, name)), name
