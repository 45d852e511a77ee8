"""Propagation of configuration changes between instances sharing one store.

A change committed through one instance must reach another instance's ``subscribe`` callback
within one second: on SQLite as ``(None, None)`` (its ``data_version`` poll cannot say what
changed), on PostgreSQL as ``(domain, key)`` through LISTEN/NOTIFY. Instances are two stores
in this process (separate connections), and a separate writer process. The PostgreSQL
listener must also survive a restart of the server: report ``(None, None)``, then changes again.
Every latency is measured and printed.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratekeeper.config import ConfigStore, open_config_store
from ratekeeper.core.errors import ConfigStoreError
from ratekeeper.core.overrides import Override
from tests.config_stores import KINDS, fresh_store
from tests.servers import PostgresServer

#: The promise: other instances' changes are reported within this many seconds.
BOUND = 1.0
ROUNDS = 5

Event = tuple[float, str | None, str | None]


class Recorder:
    """A subscriber that queues ``(arrival time, domain, key)``."""

    def __init__(self, store: ConfigStore) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        store.subscribe(self)

    def __call__(self, domain: str | None, key: str | None) -> None:
        self.events.put((time.monotonic(), domain, key))

    def next(self, timeout: float = BOUND) -> Event:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no change reported within {timeout}s") from None

    def quiet(self, seconds: float) -> list[Event]:
        """What arrives in the next ``seconds``."""
        time.sleep(seconds)
        found = []
        while not self.events.empty():
            found.append(self.events.get_nowait())
        return found


def expected(kind: str, domain: str, key: str) -> tuple[str | None, str | None]:
    return (None, None) if kind == "sqlite" else (domain, key)


@pytest.fixture(params=KINDS)
def pair(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, ConfigStore, ConfigStore]]:
    url, options = fresh_store(request.param, request, tmp_path)
    writer = open_config_store(url, **options)
    reader = open_config_store(url, **options)
    yield request.param, writer, reader
    reader.close()
    writer.close()


def test_changes_reach_another_instance_within_a_second(
    pair: tuple[str, ConfigStore, ConfigStore], record_property: Any
) -> None:
    kind, writer, reader = pair
    seen = Recorder(reader)
    latencies = []
    for round_ in range(ROUNDS):
        key = f"user:{round_}"
        for change in ("set", "delete"):
            started = time.monotonic()
            if change == "set":
                writer.set(key, Override(round_ + 1, 1), "api")
            else:
                assert writer.delete(key, "api")
            arrived, domain, got = seen.next()
            assert (domain, got) == expected(kind, "api", key)
            latencies.append(arrived - started)
            if change == "set":
                assert reader.get(key, "api") == Override(round_ + 1, 1)
            else:
                assert reader.get(key, "api") is None
            time.sleep(0.05)
    assert max(latencies) <= BOUND
    print(
        f"\n{kind}: {len(latencies)} changes, latency mean {sum(latencies) / len(latencies):.3f}s"
        f" max {max(latencies):.3f}s"
    )
    record_property(f"{kind}-max-latency", round(max(latencies), 4))


def test_own_changes_are_reported_once(pair: tuple[str, ConfigStore, ConfigStore]) -> None:
    _, writer, _ = pair
    seen = Recorder(writer)
    writer.set("k", Override(1, 1), "d")
    assert writer.delete("k", "d")
    assert [(d, k) for _, d, k in seen.quiet(0.6)] == [("d", "k"), ("d", "k")]


WRITER = """
import json, sys
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override

store = open_config_store(sys.argv[1], **json.loads(sys.argv[2]))
for line in sys.stdin:
    store.set(line.strip(), Override(7, 1), "api")
    print("done", flush=True)
store.close()
"""


@pytest.mark.parametrize("kind", KINDS)
def test_changes_from_another_process(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url, options = fresh_store(kind, request, tmp_path)
    reader = open_config_store(url, **options)
    seen = Recorder(reader)
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, json.dumps(options)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        for round_ in range(3):
            key = f"remote:{round_}"
            child.stdin.write(key + "\n")
            child.stdin.flush()
            assert child.stdout.readline() == "done\n"
            committed = time.monotonic()
            arrived, domain, got = seen.next()
            assert (domain, got) == expected(kind, "api", key)
            assert arrived - committed <= BOUND
            assert reader.get(key, "api") == Override(7, 1)
        child.stdin.close()
        assert child.wait(30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        child.stdout.close()
        reader.close()


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(120)
def test_postgres_listener_recovers_after_a_restart(record_property: Any) -> None:
    server = PostgresServer()  # its own server: this test stops it
    try:
        writer = open_config_store(server.url, table="restarted", timeout=2.0)
        reader = open_config_store(server.url, table="restarted", timeout=2.0)
        seen = Recorder(reader)
        writer.set("before", Override(1, 1))
        assert seen.next()[1:] == ("", "before")

        server.stop()
        with pytest.raises(ConfigStoreError, match=r"PostgreSQL configuration store .*: cannot"):
            writer.get("before")
        assert seen.quiet(1.5) == []  # down for a while: the listener retries, with backoff
        server.start()
        restarted = time.monotonic()
        arrived, domain, key = seen.next(timeout=30)
        assert (domain, key) == (None, None)
        recovered = arrived - restarted
        assert recovered <= 2 * BOUND  # the listener retries at least every second

        started = time.monotonic()
        writer.set("after", Override(2, 1))  # its idle connection died: it reconnects
        arrived, domain, key = seen.next()
        assert (domain, key) == ("", "after")
        assert reader.get("after") == Override(2, 1)
        print(
            f"\nlistener reported (None, None) {recovered:.2f}s after the restart;"
            f" the next change arrived in {arrived - started:.3f}s"
        )
        record_property("postgres-restart-recovery", round(recovered, 3))
        reader.close()
        writer.close()
    finally:
        server.remove()
