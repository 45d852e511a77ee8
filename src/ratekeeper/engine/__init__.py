"""The decision engine: rules and per-key overrides joined with a request store.

``Engine.is_allowed(key)`` decides by the limit the configuration store holds for the key;
``Engine.check(domain, descriptors)`` decides a request with Envoy's rate-limit semantics. Both
go through one core (``plans``), and every surface (HTTP, gRPC, middleware, CLI) translates to
these calls.
"""

from ratekeeper.core.store_keys import descriptor_key
from ratekeeper.engine.engines import AsyncEngine, Engine
from ratekeeper.engine.verdict import UNLIMITED, Descriptor, Status, Verdict

__all__ = [
    "UNLIMITED",
    "AsyncEngine",
    "Descriptor",
    "Engine",
    "Status",
    "Verdict",
    "descriptor_key",
]
