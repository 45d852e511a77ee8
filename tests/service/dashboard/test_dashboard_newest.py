"""The dashboard shows each key's newest decision, whichever process made it: of the latest
decision each process knows of a key, the one recorded last (by the wall clock of the host the
workers share), whichever process wrote its record last, and whether a reader finds it in a
worker's slot still filling or in one that is over. Under a fake clock."""

from __future__ import annotations

from pathlib import Path

from ratekeeper import Engine
from ratekeeper.core.frequent import Summary
from ratekeeper.rules import parse_rules
from ratekeeper.service.dashboard import Recorder, SharedShots, stats
from ratekeeper.service.dashboard.recorder import SLOT, Latest, Shot, Slot
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import FakeClock

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 5, name: per-user}
"""
START = 1_800_000_000.0  # a slot's first second
KEY = "api/user:alice"
#: The pids of two workers' records; neither is this process's.
EARLY, LATE = 1, 2


def latest(remaining: int, allowed: bool, at: float) -> Latest:
    return ("per-user", "5/day", "fixed_window", remaining, allowed, at)


def slot(decisions: int, refusals: int) -> Slot:
    refused = {KEY: refusals} if refusals else {}
    return Slot(Summary.of({KEY: decisions}, 1000), Summary.of(refused, 1000))


def shot(pid: int, at: float, slots: dict[int, Slot], newest: Latest) -> Shot:
    return Shot(pid, at, [], [], slots, {KEY: newest}, started=START)


def shown(shots: list[Shot], now: float) -> tuple[int, int, bool]:
    """The key's count, and the remaining and result of the decision the dashboard shows."""
    keys = stats.top(shots, now, 60, 10, 1000)["requests"]["keys"]
    (listed,) = (one for one in keys if f"{one['domain']}/{one['key']}" == KEY)
    return listed["count"], listed["remaining"], listed["allowed"]


def test_the_decision_recorded_last_is_shown_whichever_record_was_written_last() -> None:
    first = shot(EARLY, START + 9, {int(START): slot(1, 0)}, latest(4, True, START + 1))
    then = shot(LATE, START + 5, {int(START): slot(9, 5)}, latest(0, False, START + 2))
    assert shown([first, then], START + 9) == (10, 0, False)
    assert shown([then, first], START + 9) == (10, 0, False)


def test_a_newer_decision_in_another_workers_finished_slot_is_shown(tmp_path: Path) -> None:
    shared = SharedShots(str(tmp_path))
    over, filling = int(START), int(START) + SLOT
    # The other worker decided last in a slot that is over; its slot still filling has no
    # decision of the key.
    other = shot(LATE, START + 12, {over: slot(9, 5)}, latest(0, False, START + 8))
    other.slots[filling] = Slot(Summary.of({"api/user:bob": 1}, 1000), Summary(1000))
    shared.publish(other)
    assert (tmp_path / f"dashboard_{LATE}_{over}.json").exists()
    # This worker answers: its record is the newest, its decision of the key the oldest.
    own = shot(EARLY, START + 15, {over: slot(1, 0)}, latest(4, True, START + 1))
    assert shown([own, *shared.others(EARLY)], START + 15) == (10, 0, False)


def test_of_one_workers_files_the_newest_decision_is_read(tmp_path: Path) -> None:
    shared = SharedShots(str(tmp_path))
    over, filling = int(START), int(START) + SLOT
    shared.publish(shot(LATE, START + 10.5, {over: slot(3, 0)}, latest(2, True, START + 3)))
    both = {over: slot(3, 0), filling: slot(6, 5)}
    shared.publish(shot(LATE, START + 12, both, latest(0, False, START + 11)))
    own = shot(EARLY, START + 15, {over: slot(1, 0)}, latest(4, True, START + 1))
    (read,) = shared.others(EARLY)
    assert read.latest[KEY] == latest(0, False, START + 11)
    assert shown([own, read], START + 15) == (10, 0, False)


class Worker:
    """An engine on ``store`` observed by the dashboard's recorder, as one worker of a
    service; ``clock`` is the host's."""

    def __init__(self, store: MemoryStore, clock: FakeClock) -> None:
        self.engine = Engine(store, rules=parse_rules(RULES, "rules.yaml"))
        metrics = Metrics()
        metrics.track(self.engine)
        self.recorder = Recorder(self.engine, metrics, clock=clock)

    def check(self, times: int = 1) -> None:
        for _ in range(times):
            self.engine.check("api", [[("user", "alice")]])


def test_two_workers_of_one_store_show_the_store_s_state(tmp_path: Path) -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock=clock)
    answering, other = Worker(store, clock), Worker(store, clock)
    answering.check()  # 4 left
    clock.advance(0.001)
    other.check(9)  # 0 left, the last 5 refused
    recorded = other.recorder.shot()
    assert recorded.latest[KEY][3:] == (0, False, START + 0.001)
    clock.advance(1)
    shared = SharedShots(str(tmp_path))
    recorded.pid = LATE
    shared.publish(recorded)
    own = answering.recorder.shot()
    assert own.latest[KEY][3:] == (4, True, START)
    seen = shown([own, *shared.others(own.pid)], own.at)
    looked = answering.engine.check("api", [[("user", "alice")]], 0).statuses[0]
    assert seen == (10, looked.remaining, False) == (10, 0, False)
