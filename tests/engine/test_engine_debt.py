"""An engine that counts every hit (``Engine(debt=True)``), and ``charge``: Envoy's post-paid
pattern decides as the reference service decides it.

The reference's example rules (``tests/fixtures/rules/envoy/examples/example.yaml``:
``service_1`` 1 a minute, ``service_2`` 2 a minute, both in ``quota_mode``) run through the
sequences of its integration scripts ``token-quota.sh``, ``quota.sh`` and
``multiservice-tokenquota.sh``, with the descriptors its example Envoy
(``examples/envoy/proxy.yaml``) sends: on the request path a check of ``hits_addend: 0``, and
when the response ends (``apply_on_stream_done``) a charge of ``hits_addend: 1``. On a fake
clock, so each sequence is exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from ratekeeper import ConfigError, Decision, Engine, InvalidLimitError, Limit, MemoryStore
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.engine import AsyncEngine, Descriptor
from ratekeeper.rules import load_rules, parse_rules
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock

EXAMPLE = (
    Path(__file__).resolve().parent.parent / "fixtures" / "rules" / "envoy" / "examples"
) / "example.yaml"

SERVICE_1 = (("service", "service_1"),)
SERVICE_2 = (("service", "service_2"),)


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


def engine_of(store: MemoryStore, *, debt: bool = True) -> Engine:
    return Engine(store, rules=load_rules([EXAMPLE]), debt=debt)


def token_quota(engine: Engine) -> bool:
    """One request to /tokenquota: the check on the request path, and, if it passed, the
    charge when the response ends."""
    allowed = engine.check("rl", [Descriptor(SERVICE_2, hits=0)]).allowed
    if allowed:
        engine.check("rl", [Descriptor(SERVICE_2, hits=1)])
    return allowed


def test_token_quota_holds_from_the_first_window_on(store: MemoryStore, clock: FakeClock) -> None:
    """token-quota.sh: requests 1 to 3 pass, the 4th is refused; a minute later the quota is
    back. The 3rd request's charge passes the limit (3 of 2): it is counted, and refuses the
    4th request's check of cost 0."""
    engine = engine_of(store)
    clock.set(1_700_000_040.0)  # the start of a minute
    assert [token_quota(engine) for _ in range(4)] == [True, True, True, False]
    charge = engine.check("rl", [Descriptor(SERVICE_2, hits=1)]).statuses[0]
    assert (charge.allowed, charge.remaining, charge.decision and charge.decision.granted) == (
        False,
        0,
        1,
    )
    clock.advance(59.9)
    assert not token_quota(engine)
    clock.advance(0.1)
    assert [token_quota(engine) for _ in range(4)] == [True, True, True, False]


def test_without_debt_a_count_at_its_limit_never_refuses_a_check_of_cost_0(
    store: MemoryStore, clock: FakeClock
) -> None:
    """The failure debt fixes: a refused charge counts nothing, so the count stays at the limit
    and every check of cost 0 passes."""
    engine = engine_of(store, debt=False)
    clock.set(1_700_000_040.0)
    assert [token_quota(engine) for _ in range(6)] == [True] * 6


def test_quota_script_with_debt(store: MemoryStore, clock: FakeClock) -> None:
    """quota.sh: (service_1), (service_2) in quota mode, each request counting 1 on both: the
    2nd is over for service_1 only and passes, the 3rd is over for both and is refused."""
    engine = engine_of(store)
    clock.set(1_700_000_040.0)
    quota = [SERVICE_1, SERVICE_2]
    verdicts = [engine.check("rl", quota) for _ in range(3)]
    assert [verdict.allowed for verdict in verdicts] == [True, True, False]
    assert [status.allowed for status in verdicts[1].statuses] == [False, True]
    # Each refusal was counted: 3 on service_1 (of 1) and 3 on service_2 (of 2).
    assert [s.decision and s.decision.granted for s in verdicts[2].statuses] == [1, 1]
    clock.advance(60)
    assert engine.check("rl", quota).allowed


def test_multiservice_token_quota(store: MemoryStore, clock: FakeClock) -> None:
    """multiservice-tokenquota.sh: checks of cost 0 on service_1 and service_2 (quota mode);
    the request goes to the first service whose descriptor passed, and that service is
    charged 1 when the response ends. service_1 serves 2 a minute, service_2 then 3, and the
    6th request is refused."""
    engine = engine_of(store)
    clock.set(1_700_000_040.0)
    served = []
    for _ in range(6):
        verdict = engine.check("rl", [Descriptor(SERVICE_1, hits=0), Descriptor(SERVICE_2, hits=0)])
        if not verdict.allowed:
            served.append(None)
            continue
        status = next(one for one in verdict.statuses if one.allowed)
        assert status.rule is not None and status.rule.metadata is not None
        name = status.rule.metadata["service_with_quota"]["name"]
        served.append(name)
        engine.check("rl", [Descriptor((("service", name),), hits=1)])
    assert served == ["service_1", "service_1", "service_2", "service_2", "service_2", None]
    clock.advance(60)
    verdict = engine.check("rl", [Descriptor(SERVICE_1, hits=0), Descriptor(SERVICE_2, hits=0)])
    assert [one.allowed for one in verdict.statuses] == [True, True]


def test_the_async_engine_counts_every_hit_alike(clock: FakeClock) -> None:
    async def scenario() -> list[bool]:
        engine = AsyncEngine(AsyncMemoryStore(clock=clock), rules=load_rules([EXAMPLE]), debt=True)
        answers = []
        for _ in range(4):
            allowed = (await engine.check("rl", [Descriptor(SERVICE_2, hits=0)])).allowed
            if allowed:
                await engine.check("rl", [Descriptor(SERVICE_2, hits=1)])
            answers.append(allowed)
        await engine.close()
        return answers

    clock.set(1_700_000_040.0)
    assert asyncio.run(scenario()) == [True, True, True, False]


RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}
"""


def test_every_limit_the_engine_applies_counts_every_hit(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Rules, overrides, the default, a limit sent with a descriptor and one given to ``hit``
    all count a refused hit; a sliding log (which cannot hold a debt) decides as without."""
    config = open_config_store("sqlite://:memory:")
    config.set("special", Override(2, 60, "fixed_window"))
    engine = Engine(store, rules=parse_rules(RULES), config=config, default=Limit(2, 60), debt=True)
    clock.set(1_700_000_040.0)

    def counted(decide: Callable[[], Decision | None]) -> list[tuple[bool, int]]:
        answers = [decide() for _ in range(3)]
        return [(one.allowed, one.granted) for one in answers if one is not None]

    owing = [(True, 1), (True, 1), (False, 1)]
    assert counted(lambda: engine.check("api", [[("user", "a")]]).statuses[0].decision) == owing
    assert counted(lambda: engine.decide("special")) == owing
    assert counted(lambda: engine.decide("anyone")) == owing
    sent = Descriptor((("user", "b"),), Limit(2, 60))
    assert counted(lambda: engine.check("api", [sent]).statuses[0].decision) == owing
    assert counted(lambda: engine.hit("given", "2/minute")) == owing
    log = [(True, 1), (True, 1), (False, 0)]
    assert counted(lambda: engine.check("api", [[("log", "x")]]).statuses[0].decision) == log
    # Every one of them is in debt: a look is refused.
    assert not engine.peek("special").allowed
    assert not engine.peek("given", "2/minute").allowed


def test_charge_counts_past_the_limit(store: MemoryStore, clock: FakeClock) -> None:
    engine = Engine(store, default=Limit(5, 60, "token_bucket"))
    decision = engine.charge("user:1", 4)
    assert (decision.allowed, decision.remaining, decision.granted) == (True, 1, 4)
    decision = engine.charge("user:1", 4)
    assert (decision.allowed, decision.remaining, decision.granted) == (False, 0, 4)
    assert decision.retry_after == pytest.approx(84.0)  # -3 tokens, 4 more at 1 per 12 s
    # The debt refuses decide's hits, and a look, until it is paid back: 36 s for -3.
    assert not engine.decide("user:1").allowed
    clock.advance(35.9)
    assert not engine.peek("user:1").allowed
    clock.advance(0.1)
    assert engine.peek("user:1").allowed
    # A given limit: the counters hit uses.
    assert engine.charge("k", 3, "2/minute").granted == 3
    assert not engine.hit("k", "2/minute", 0).allowed
    # No limit applies: nothing to count.
    assert Engine(store).charge("free", 9).allowed


def test_charge_refuses_a_limit_that_cannot_hold_a_debt(store: MemoryStore) -> None:
    engine = Engine(store)
    with pytest.raises(InvalidLimitError, match="debt does not apply to sliding_log"):
        engine.charge("k", 1, Limit(2, 60, "sliding_log"))


@pytest.mark.parametrize("value", [1, "true", None])
def test_debt_is_a_bool(value: object) -> None:
    with pytest.raises(ConfigError, match="debt must be True or False"):
        Engine(debt=value)  # type: ignore[arg-type]
