"""A request store without shards (one Redis) that does not answer: ``/readyz``, ``/metrics``
and the dashboard say the same, its breaker open and no shard named. The store is a Redis
address nobody listens on; the breakers run on a fake clock, so the breaker stays open."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.dashboard import Dashboard, Recorder
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.service.runtime.app import create_app
from ratekeeper.testing import FakeClock
from tests.servers import free_port
from tests.service.asgi import AppClient

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
"""
TOKEN = "store-health-token-0123456789"
CHECK = {"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]}


def test_one_redis_down_has_its_breaker_open_and_names_no_shard() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0?timeout=0.5"
    engine = AsyncEngine(url, rules=parse_rules(RULES, "rules.yaml"))
    engine.store.breakers.clock = FakeClock()  # type: ignore[attr-defined]
    metrics = Metrics()
    metrics.track(engine)
    dashboard = Dashboard(engine, metrics, Recorder(engine, metrics), TOKEN)
    app = create_app(
        engine, admin_token=TOKEN, close_engine=True, metrics=metrics, dashboard=dashboard
    )
    with AppClient(app) as client:
        for _ in range(3):  # three failures in a row open the breaker
            assert client.post("/v1/check", json=CHECK).json()["degraded"] is True
        ready = client.get("/readyz")
        assert ready.status_code == 503
        store = ready.json()["store"]
        assert (store["ok"], store["breaker"], store["open_shards"]) == (False, "open", [])
        assert "127.0.0.1" in store["error"]

        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(client.get("/metrics").text)
            for sample in family.samples
        }
        assert samples["ratekeeper_store_up", ()] == 0
        assert samples["ratekeeper_store_breaker_state", (("state", "open"),)] == 1
        assert samples["ratekeeper_store_shards_open", ()] == 0

        stats = client.get("/v1/stats", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        shown = stats["store"]
        assert (shown["ok"], shown["breaker"], shown["open_shards"]) == (False, "open", [])
