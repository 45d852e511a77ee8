"""What the access log's and the decision log's tests decide: the rules, requests whose keys
and values all hold ``SECRET`` (which no line may show), and the engine over them."""

from __future__ import annotations

import logging
from typing import Any

from ratekeeper import AsyncEngine, Limit, StoreError
from ratekeeper.rules import parse_rules
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: plan
    value: free
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 100}
"""
#: Every key and value the requests carry has this in it: none may reach the log.
SECRET = "secret"


def check(*entries: tuple[str, str], domain: str = "api") -> dict[str, Any]:
    """A check of ``domain`` with one descriptor of ``entries``."""
    return {
        "domain": domain,
        "descriptors": [{"entries": [{"key": k, "value": v} for k, v in entries]}],
    }


def engine_of(clock: FakeClock, store: Any = None) -> AsyncEngine:
    """An engine of ``RULES`` on ``clock``, over ``store`` (a memory store by default)."""
    return AsyncEngine(
        store if store is not None else AsyncMemoryStore(clock=clock),
        rules=parse_rules(RULES, "rules.yaml"),
        default=Limit(1, 60),
        domain="keys",
        clock=clock,
    )


def no_secret(records: list[logging.LogRecord]) -> None:
    """No record says ``SECRET``, in its message or in any of its fields."""
    for record in records:
        assert SECRET not in record.getMessage()
        assert not any(SECRET in str(value) for value in vars(record).values()), vars(record)


class Down(AsyncMemoryStore):
    """A store whose every decision fails."""

    async def apply(self, *args: Any, **options: Any) -> Any:
        raise StoreError("down")
