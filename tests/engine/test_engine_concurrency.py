"""The engine under real threads: exact totals while the configuration keeps changing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ratekeeper import MemoryStore
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.engine import Engine
from ratekeeper.rules import parse_rules
from ratekeeper.testing import FakeClock

THREADS = 8
ATTEMPTS = 2_000
LIMIT = 1_000

RULES = parse_rules(
    f"""
domain: api
descriptors:
  - key: user
    rate_limit: {{requests_per_unit: {LIMIT}, unit: day, algorithm: sliding_log}}
""",
    "rules.yaml",
)


@pytest.mark.slow
def test_exact_totals_while_other_overrides_change(tmp_path: Path, clock: FakeClock) -> None:
    url = f"sqlite:///{tmp_path / 'config.db'}"
    config = open_config_store(url)
    config.set("user:241531", Override(LIMIT, 86_400, "gcra"))
    engine = Engine(MemoryStore(clock=clock), rules=RULES, config=config)
    writer = open_config_store(url)  # another instance: its changes empty the engine's cache
    admitted = {"check": 0, "is_allowed": 0}
    lock = threading.Lock()
    start = threading.Barrier(THREADS + 1)
    done = threading.Event()

    def decide(entry_point: str) -> None:
        count = 0
        start.wait()
        for _ in range(ATTEMPTS):
            if entry_point == "check":
                count += engine.check("api", [[("user", "alice")]]).allowed
            else:
                count += engine.is_allowed("user:241531")
        with lock:
            admitted[entry_point] += count

    def churn() -> None:
        start.wait()
        number = 0
        while not done.is_set():
            writer.set(f"user:other{number % 50}", Override(5, 60))
            number += 1

    workers = [
        threading.Thread(target=decide, args=("check" if n % 2 else "is_allowed",))
        for n in range(THREADS)
    ]
    changer = threading.Thread(target=churn)
    for thread in [*workers, changer]:
        thread.start()
    for thread in workers:
        thread.join(120)
    done.set()
    changer.join(30)
    try:
        assert admitted == {"check": LIMIT, "is_allowed": LIMIT}
    finally:
        engine.close()
        writer.close()
