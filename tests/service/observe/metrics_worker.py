"""A process counting into prometheus_client's multiprocess files, as a worker of the service
does: ``python -m tests.service.observe.metrics_worker SPEC`` (see ``Worker``), for
``test_metrics_workers``.

``PROMETHEUS_MULTIPROC_DIR`` must be set in its environment. SPEC is JSON: ``health`` (the
fields of the ``Health`` its store's ping answers), ``keys`` (decided in order, by the engine's
default limit of 2 a minute), ``limit`` and ``enter`` (an ``InFlightBound`` of that limit, entered
that many times). Once it has decided and published, it prints ``ready``; then, per line read:
``text`` prints ``metrics.text()`` followed by a line ``END``; ``close`` calls
``metrics.close()`` and prints ``closed``. It ends at the end of its input.
"""

from __future__ import annotations

import json
import sys

from ratekeeper import Limit
from ratekeeper.engine import Engine
from ratekeeper.service.inflight import InFlightBound
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.stores.health import Health
from ratekeeper.stores.memory import MemoryStore


class Pinged(MemoryStore):
    """A memory store whose ping answers ``health``."""

    def __init__(self, health: Health) -> None:
        super().__init__()
        self.health = health

    def ping(self) -> Health:
        return self.health


def main() -> None:
    spec = json.loads(sys.argv[1])
    health = spec["health"]
    store = Pinged(Health(**{**health, "open_shards": tuple(health.get("open_shards", ()))}))
    metrics = Metrics(multiprocess=True)
    engine = Engine(store, default=Limit(2, 60), domain="keys")
    metrics.track(engine)
    bound = InFlightBound(spec["limit"])
    for _ in range(spec["enter"]):
        bound.enter("http")
    metrics.in_flight_bound = bound
    for key in spec["keys"]:
        engine.decide(key)
    metrics.publish()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "text":
            sys.stdout.write(metrics.text().decode() + "END\n")
        elif line.strip() == "close":
            metrics.close()
            sys.stdout.write("closed\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
