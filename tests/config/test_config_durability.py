"""Durability of the configuration store: a writer killed with SIGKILL loses no acknowledged
change.

A child process writes 10,000 overrides one by one and prints one line per ``set`` that has
returned (that is, committed). The parent reads those acknowledgements and, at a random point
after about 3,000 of them, kills the child by pid with SIGKILL. It then reads whatever
acknowledgements were already on the pipe, reopens the store, and demands every acknowledged
override, with its exact value. At most the one write in flight may be there unacknowledged.
Runs on SQLite (WAL, synchronous=FULL) and on a real PostgreSQL server with fsync on.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from tests.config_stores import KINDS, fresh_store
from tests.servers import PostgresServer

WRITES = 10_000
DOMAIN = "durability"

CHILD = """
import json, sys
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override

store = open_config_store(sys.argv[1], **json.loads(sys.argv[2]))
print("ready", flush=True)
for i in range(int(sys.argv[3])):
    store.set(f"user:{i}", Override(i + 1, 60, "gcra"), sys.argv[4])
    sys.stdout.write(f"{i}\\n")
    sys.stdout.flush()
"""


def create_schema(url: str, options: dict[str, Any]) -> None:
    """Make the store's schema exist before the child starts (a store opens on first use)."""
    store = open_config_store(url, **options)
    assert store.get("nothing", DOMAIN) is None
    store.close()


def expected(index: int) -> Override:
    return Override(index + 1, 60, "gcra")


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", KINDS)
def test_acknowledged_writes_survive_sigkill(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, record_property: Any
) -> None:
    url, options = fresh_store(kind, request, tmp_path)
    create_schema(url, options)
    kill_after = random.randint(2_500, 3_500)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, json.dumps(options), str(WRITES), DOMAIN],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "ready\n"
        started = time.monotonic()
        acked: list[int] = []
        while len(acked) < kill_after:
            line = child.stdout.readline()
            assert line, f"the writer ended after {len(acked)} acknowledgements"
            acked.append(int(line))
        os.kill(child.pid, signal.SIGKILL)
        elapsed = time.monotonic() - started
        acked += [int(line) for line in child.stdout]  # acknowledged before the kill landed
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    assert acked == list(range(len(acked)))

    store = open_config_store(url, **options)
    try:
        found = {key: override for _, key, override in store.items(DOMAIN)}
        missing = [i for i in acked if found.get(f"user:{i}") != expected(i)]
        assert not missing, f"{len(missing)} acknowledged writes lost, first {missing[:5]}"
        extra = sorted(set(found) - {f"user:{i}" for i in acked})
        assert extra in ([], [f"user:{len(acked)}"])  # at most the write in flight
        for key in extra:
            assert found[key] == expected(int(key.split(":")[1]))
    finally:
        store.close()
    rate = kill_after / elapsed
    print(
        f"\n{kind}: killed after {kill_after} acks read ({rate:.0f} writes/s);"
        f" {len(acked)} acknowledged in all, {len(found)} rows found"
    )
    record_property(f"{kind}-acknowledged", len(acked))
    record_property(f"{kind}-rows-found", len(found))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_acknowledged_writes_survive_a_postgres_crash(record_property: Any) -> None:
    """The writer and the PostgreSQL server are killed with SIGKILL at once, as a machine
    failure would end both; after the server restarts (crash recovery from its WAL), every
    acknowledged override is there."""
    server = PostgresServer()  # its own server: this test kills it
    try:
        options = {"table": "crash", "timeout": 2.0}
        create_schema(server.url, options)
        kill_after = random.randint(1_000, 2_000)
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, server.url, json.dumps(options), str(WRITES), DOMAIN],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # its last write may fail as the server dies: expected
            text=True,
        )
        assert child.stdout is not None
        try:
            assert child.stdout.readline() == "ready\n"
            acked: list[int] = []
            while len(acked) < kill_after:
                line = child.stdout.readline()
                assert line, f"the writer ended after {len(acked)} acknowledgements"
                acked.append(int(line))
            server.kill()
            os.kill(child.pid, signal.SIGKILL)
            acked += [int(line) for line in child.stdout if line.strip().isdigit()]
        finally:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
            child.wait(30)
            child.stdout.close()

        server.start()
        store = open_config_store(server.url, **options)
        try:
            found = {key: override for _, key, override in store.items(DOMAIN)}
        finally:
            store.close()
        missing = [i for i in acked if found.get(f"user:{i}") != expected(i)]
        assert not missing, f"{len(missing)} acknowledged writes lost, first {missing[:5]}"
        assert len(found) - len(acked) in (0, 1)  # at most the write in flight
        print(
            f"\npostgres crash: {len(acked)} acknowledged before the kill,"
            f" {len(found)} rows after crash recovery"
        )
        record_property("postgres-crash-acknowledged", len(acked))
        record_property("postgres-crash-rows-found", len(found))
    finally:
        server.remove()
