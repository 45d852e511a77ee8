"""The service's Prometheus metrics: a real engine decides under a fake clock with the metrics as
its observer, and the tests read the exposition text back as Prometheus parses it."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ratekeeper import Limit, MemoryStore
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.engine import AsyncEngine, Engine
from ratekeeper.rules import load_rules, parse_rules
from ratekeeper.service.inflight import InFlightBound
from ratekeeper.service.observe.metrics import CONTENT_TYPE, Metrics
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.stores.wrappers.resilience import Resilient
from ratekeeper.testing import FakeClock
from tests.stores.flaky import Flaky

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: plan
    value: free
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: health
    rate_limit: {unlimited: true}
"""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(metrics: Metrics) -> Samples:
    """Every sample of the exposition, by name and sorted labels, as Prometheus reads it."""
    found: Samples = {}
    for family in text_string_to_metric_families(metrics.text().decode()):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def decisions(metrics: Metrics) -> dict[tuple[str, str, str], float]:
    """``ratekeeper_decisions_total`` by ``(domain, rule, result)``."""
    return {
        (labels["domain"], labels["rule"], labels["result"]): value
        for (name, pairs), value in samples(metrics).items()
        if name == "ratekeeper_decisions_total"
        for labels in [dict(pairs)]
    }


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return samples(metrics)[name, tuple(sorted(labels.items()))]


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


def test_decisions_are_counted_by_domain_rule_and_result(
    metrics: Metrics, clock: FakeClock
) -> None:
    config = open_config_store("sqlite://:memory:")
    config.set("vip", Override(3, 60, "fixed_window"), "keys")
    engine = Engine(
        MemoryStore(clock=clock),
        rules=parse_rules(RULES, "rules.yaml"),
        config=config,
        default=Limit(1, 60),
        domain="keys",
        cache_ttl=3600,
        clock=clock,
        observer=metrics,
    )
    metrics.track(engine)
    with engine:
        for _ in range(3):
            engine.check("api", [[("user", "a")]])
        for _ in range(2):
            engine.check("api", [[("plan", "free")]])
            engine.check("api", [[("health", "x")]])
        engine.check("api", [[("other", "x")]])
        for _ in range(4):
            engine.decide("vip")  # the override from the configuration store
        for _ in range(2):
            engine.decide("anon")  # the engine's default limit
        engine.hit("k", "5/minute")  # a limit the caller gives
        engine.check("nope", [[("user", "a")]])  # a domain the rules do not name
        assert decisions(metrics) == {
            ("api", "per_user", "allowed"): 2,
            ("api", "per_user", "limited"): 1,
            ("api", "plan=free", "allowed"): 1,
            ("api", "plan=free", "shadowed"): 1,
            ("api", "health", "allowed"): 2,
            ("api", "none", "allowed"): 1,
            ("keys", "override", "allowed"): 3,
            ("keys", "override", "limited"): 1,
            ("keys", "default", "allowed"): 1,
            ("keys", "default", "limited"): 1,
            ("keys", "given", "allowed"): 1,
            ("unknown", "none", "allowed"): 1,
        }
        # One plan loaded per distinct key or descriptor; the other decisions found theirs.
        assert value(metrics, "ratekeeper_plan_cache_misses_total") == 7
        assert value(metrics, "ratekeeper_plan_cache_hits_total") == 15 - 7
        assert value(metrics, "ratekeeper_plan_cache_entries") == 7
        assert value(metrics, "ratekeeper_store_up") == 1
        assert value(metrics, "ratekeeper_store_breaker_state", state="closed") == 1
        assert value(metrics, "ratekeeper_store_errors_total") == 0
        assert value(metrics, "ratekeeper_config_store_errors_total") == 0
        assert value(metrics, "ratekeeper_rule_reloads_total") == 0


def test_a_degraded_decision_is_counted_and_the_store_collector_shows_the_failures(
    metrics: Metrics, clock: FakeClock
) -> None:
    flaky = Flaky()
    store = Resilient(flaky, on_store_error="allow")
    store.breaker.clock = clock
    engine = Engine(store, default=Limit(2, 60, "gcra"), domain="keys", observer=metrics)
    metrics.track(engine)
    engine.decide("k")
    flaky.down = True
    for _ in range(5):  # three failures open the breaker; the policy answers the other two
        engine.decide("k")
    assert decisions(metrics) == {
        ("keys", "default", "allowed"): 1,
        ("keys", "default", "degraded"): 5,
    }
    assert value(metrics, "ratekeeper_store_errors_total") == 3
    assert value(metrics, "ratekeeper_store_breaker_openings_total") == 1
    assert value(metrics, "ratekeeper_store_degraded_decisions_total") == 5
    assert value(metrics, "ratekeeper_store_up") == 0
    assert value(metrics, "ratekeeper_store_breaker_state", state="open") == 1
    assert value(metrics, "ratekeeper_store_breaker_state", state="closed") == 0


def test_a_refused_hit_through_a_failing_store_is_degraded_not_limited(
    metrics: Metrics, clock: FakeClock
) -> None:
    flaky = Flaky()
    flaky.down = True
    store = Resilient(flaky, on_store_error="deny")
    store.breaker.clock = clock
    engine = Engine(store, rules=parse_rules(RULES, "rules.yaml"), observer=metrics)
    engine.check("api", [[("user", "a")]])
    assert decisions(metrics) == {("api", "per_user", "degraded"): 1}


def test_ten_thousand_unknown_domains_are_one_label_set(metrics: Metrics, clock: FakeClock) -> None:
    engine = Engine(MemoryStore(clock=clock), rules=parse_rules(RULES, "rules.yaml"))
    metrics.track(engine)
    for n in range(10_000):
        engine.check(f"domain-{n}", [[("user", f"user-{n}")]])
    assert decisions(metrics) == {("unknown", "none", "allowed"): 10_000}


def test_label_sets_past_the_cap_are_counted_as_other(tmp_path: Path, clock: FakeClock) -> None:
    for n in range(10_000):  # one file per domain, as Envoy's service reads them
        (tmp_path / f"d{n}.yaml").write_text(
            f"domain: d{n}\ndescriptors:\n  - key: user\n"
            f"    rate_limit: {{unit: minute, requests_per_unit: 5, name: r{n % 3}}}\n"
        )
    metrics = Metrics(max_label_sets=100)
    engine = Engine(MemoryStore(clock=clock), rules=load_rules([tmp_path]), observer=metrics)
    for n in range(10_000):
        engine.check(f"d{n}", [[("user", "a")]])
    counted = decisions(metrics)
    assert counted == {
        **{(f"d{n}", f"r{n % 3}", "allowed"): 1 for n in range(100)},
        ("other", "other", "allowed"): 9_900,
    }


def test_the_engines_own_domain_and_the_rules_domains_are_known_before_a_rule_matches(
    metrics: Metrics, clock: FakeClock
) -> None:
    engine = Engine(MemoryStore(clock=clock), rules=parse_rules(RULES, "rules.yaml"), domain="k")
    metrics.track(engine)
    engine.check("api", [[("other", "x")]])
    engine.decide("key")
    engine.check("elsewhere", [[("user", "a")]])
    assert decisions(metrics) == {
        ("api", "none", "allowed"): 1,
        ("k", "none", "allowed"): 1,
        ("unknown", "none", "allowed"): 1,
    }


def test_counts_are_exact_under_concurrent_decisions(metrics: Metrics, clock: FakeClock) -> None:
    engine = Engine(
        MemoryStore(clock=clock), default=Limit(1_000_000, 60), domain="k", observer=metrics
    )
    metrics.track(engine)
    barrier = threading.Barrier(8)

    def decide(worker: int) -> None:
        barrier.wait()
        for n in range(2_000):
            engine.decide(f"w{worker}-{n % 10}")

    threads = [threading.Thread(target=decide, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert decisions(metrics) == {("k", "default", "allowed"): 16_000}


def test_rule_reloads_and_their_errors_are_counted(
    metrics: Metrics, tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    engine = Engine(MemoryStore(clock=clock), rules=path, reload_interval=None, observer=metrics)
    metrics.track(engine)
    path.write_text(RULES.replace("requests_per_unit: 2", "requests_per_unit: 20"))
    assert engine.reload()
    path.write_text(RULES + "  - key: [not a key]\n")
    assert not engine.reload()
    assert value(metrics, "ratekeeper_rule_reloads_total") == 1
    assert value(metrics, "ratekeeper_rule_reload_errors_total") == 1


def test_configuration_store_errors_are_counted(
    metrics: Metrics, tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "config.db"
    config = open_config_store(f"sqlite:///{path}")
    config.set("known", Override(3, 60, "fixed_window"))
    engine = Engine(MemoryStore(clock=clock), config=config, cache_ttl=3600, clock=clock)
    metrics.track(engine)
    with engine, sqlite3.connect(path) as db:
        db.execute(
            "UPDATE overrides SET config = ? WHERE key = ?",
            ('{"capacity": 0, "time_window_sec": 1}', "known"),
        )
        db.commit()
        engine.planner.cache.expire()
        engine.decide("known")
        assert value(metrics, "ratekeeper_config_store_errors_total") == 1
    db.close()


def test_latency_is_recorded_by_surface(metrics: Metrics) -> None:
    metrics.observe_latency("http", 0.000_2)
    metrics.observe_latency("http", 0.003)
    with metrics.timed("grpc"):
        pass
    assert value(metrics, "ratekeeper_decision_seconds_count", surface="http") == 2
    assert value(metrics, "ratekeeper_decision_seconds_bucket", surface="http", le="0.00025") == 1
    assert value(metrics, "ratekeeper_decision_seconds_bucket", surface="http", le="0.005") == 2
    assert value(metrics, "ratekeeper_decision_seconds_count", surface="grpc") == 1
    assert value(metrics, "ratekeeper_decision_seconds_count", surface="nginx") == 0
    with pytest.raises(ValueError, match="surface must be one of http, grpc, nginx, library"):
        metrics.observe_latency("smtp", 0.1)


def test_each_metrics_has_its_own_registry(clock: FakeClock) -> None:
    first, second = Metrics(), Metrics()
    engine = Engine(MemoryStore(clock=clock), default=Limit(5, 60))
    first.track(engine)
    engine.decide("k")
    assert decisions(first) == {("", "default", "allowed"): 1}
    assert decisions(second) == {}


def test_track_refuses_an_engine_observed_by_something_else(metrics: Metrics) -> None:
    with pytest.raises(ValueError, match="already has an observer"):
        metrics.track(Engine(observer=lambda domain, statuses: None))
    metrics.track(Engine())
    with pytest.raises(ValueError, match="already track another engine"):
        metrics.track(Engine())


def asgi(
    app: Any, method: str, headers: list[tuple[bytes, bytes]]
) -> tuple[int, dict[str, str], bytes]:
    """One request through an ASGI app, in process: its status, headers and body."""
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": "/metrics",
        "query_string": b"",
        "headers": headers,
    }
    asyncio.run(app(scope, receive, send))
    start, body = sent
    return (
        start["status"],
        {name.decode().lower(): value.decode() for name, value in start["headers"]},
        body["body"],
    )


def test_the_asgi_app_serves_the_exposition_and_pings_an_async_store(
    metrics: Metrics, clock: FakeClock
) -> None:
    engine = AsyncEngine(AsyncMemoryStore(clock=clock), default=Limit(5, 60), observer=metrics)
    metrics.track(engine)
    asyncio.run(engine.decide("k"))
    status, headers, body = asgi(metrics.app, "GET", [])
    assert (status, headers["content-type"]) == (200, CONTENT_TYPE)
    assert "ratekeeper_decisions_total" in body.decode()
    assert value(metrics, "ratekeeper_store_up") == 1  # pinged by the request
    status, headers, _ = asgi(
        metrics.app, "GET", [(b"accept", b"application/openmetrics-text; version=1.0.0")]
    )
    assert headers["content-type"].startswith("application/openmetrics-text")
    status, headers, body = asgi(metrics.app, "POST", [])
    assert (status, headers["allow"], body) == (405, "GET", b"")


def test_importing_ratekeeper_does_not_import_prometheus_client() -> None:
    code = (
        "import sys, ratekeeper, ratekeeper.engine, ratekeeper.service, "
        "ratekeeper.wire.translate; print('prometheus_client' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_without_the_server_extra_the_error_names_it() -> None:
    code = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "from ratekeeper import MissingExtraError\n"
        "try:\n    import ratekeeper.service.observe.metrics\n"
        "except MissingExtraError as error:\n    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == (
        "prometheus-client is not installed; install it with: pip install 'ratekeeper[server]'"
    )


def test_docs_name_every_metric_exposed(metrics: Metrics, clock: FakeClock) -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    documented = {line.split("`")[1] for line in doc.splitlines() if line.startswith("| `")}
    engine = Engine(MemoryStore(clock=clock), default=Limit(5, 60))
    metrics.track(engine)
    metrics.in_flight_bound = InFlightBound(8)  # the service's bound on decisions in flight
    engine.decide("k")
    families = text_string_to_metric_families(metrics.text().decode())
    exposed = {
        family.name + "_total" if family.type == "counter" else family.name
        for family in families
        if not family.name.endswith("_created")
    }
    assert exposed == documented
