"""Every test's duration, written to a file on every run, the slowest printed at its end.

A pytest plugin, registered by ``tests/conftest.py``. A test's duration is its setup, call and
teardown added up (so a session server a test is the first to ask for counts in its setup), as
the process that ran it measured them; under pytest-xdist the controller gathers every worker's
reports, and names the worker (``gw0``, ``gw1``...) that ran each test.

``--durations-file PATH`` says where the JSON goes (``build/test-durations/pytest.json`` under
the repository's root by default): the lane's name, its command line, its wall time, and every
test, slowest first, with its phases, its outcome, its worker and when it ended (seconds into
the lane: what ran before a test on its worker, for a failure that depends on it).
``--durations-shown N`` is how many of the slowest the terminal summary prints (30 by default;
0 prints none).

``python -m tests.durations FILE...`` adds up the files of the lanes of one run
(``scripts/test.sh`` does, after its lanes): each lane's tests and wall time, then one closing
line, ``total: N passed, N failed, N skipped``.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

#: Where the durations go when ``--durations-file`` does not say, under the rootdir.
DEFAULT = Path("build") / "test-durations" / "pytest.json"
PHASES = ("setup", "call", "teardown")


@dataclass
class Timing:
    """One test's phases, in seconds, its outcome, the worker that ran it and when it ended
    (seconds since the session began)."""

    nodeid: str
    seconds: float = 0.0
    setup: float = 0.0
    call: float = 0.0
    teardown: float = 0.0
    outcome: str = "passed"
    worker: str = ""
    ended: float = 0.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ratekeeper durations")
    group.addoption(
        "--durations-file",
        metavar="PATH",
        help=f"write every test's duration here as JSON (default: {DEFAULT} under the rootdir)",
    )
    group.addoption(
        "--durations-shown",
        type=int,
        default=30,
        metavar="N",
        help="print the N slowest tests at the end (default: 30; 0: none)",
    )


class Durations:
    """Gathers the reports of one session (the controller's, under xdist) and writes them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        given = config.getoption("durations_file")
        if given:
            self.path = Path(config.invocation_params.dir, given)
        else:
            self.path = config.rootpath / DEFAULT
        self.shown: int = config.getoption("durations_shown")
        #: Every test run, in order; a node id may come more than once (schemathesis' cases).
        self.timings: list[Timing] = []
        self.current: dict[str, Timing] = {}  # node id -> its latest test
        self.started = time.monotonic()
        self.wall = 0.0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when not in PHASES:
            return
        if report.when == "setup" or report.nodeid not in self.current:
            self.current[report.nodeid] = Timing(report.nodeid)
            self.timings.append(self.current[report.nodeid])
        timing = self.current[report.nodeid]
        setattr(timing, report.when, round(report.duration, 4))
        timing.seconds = round(timing.setup + timing.call + timing.teardown, 4)
        timing.ended = round(time.monotonic() - self.started, 2)
        if report.failed:
            timing.outcome = "failed" if report.when == "call" else f"error in {report.when}"
        elif report.skipped and timing.outcome == "passed":
            timing.outcome = "skipped"
        node = getattr(report, "node", None)  # xdist's worker, on the controller
        gateway = getattr(node, "gateway", None)
        if gateway is not None:
            timing.worker = str(gateway.id)

    def slowest(self) -> list[Timing]:
        return sorted(self.timings, key=lambda one: one.seconds, reverse=True)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.wall = time.monotonic() - self.started
        workers = getattr(self.config.option, "numprocesses", None)
        document = {
            "lane": self.path.stem,
            "command": [Path(sys.argv[0]).name, *self.config.invocation_params.args],
            "workers": workers or 0,
            "wall_seconds": round(self.wall, 2),
            "tests_seconds": round(sum(one.seconds for one in self.timings), 2),
            "tests": [asdict(one) for one in self.slowest()],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.timings:
            return
        total = sum(one.seconds for one in self.timings)
        terminalreporter.section(f"durations: {self.path.stem}")
        terminalreporter.write_line(
            f"{len(self.timings)} tests, {total:.1f} s of tests in {self.wall:.1f} s of wall "
            f"time; every test's duration is in {self.path}"
        )
        if self.shown <= 0:
            return
        terminalreporter.write_line(f"the {self.shown} slowest (setup + call + teardown):")
        for one in self.slowest()[: self.shown]:
            worker = f" [{one.worker}]" if one.worker else ""
            outcome = "" if one.outcome == "passed" else f" ({one.outcome})"
            terminalreporter.write_line(f"{one.seconds:8.2f}s{worker} {one.nodeid}{outcome}")


def pytest_configure(config: pytest.Config) -> None:
    """Gather the durations in the process that reports the session: not in an xdist worker."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Durations(config), "ratekeeper-durations")


def main(argv: list[str] | None = None) -> int:
    """Print each lane's tests and wall time, then their outcomes added up; 1 if a file is
    missing or unreadable (its lane did not finish), else 0."""
    outcomes: Counter[str] = Counter()
    status = 0
    for name in sys.argv[1:] if argv is None else argv:
        try:
            lane = json.loads(Path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            print(f"{name}: no durations ({error}): the lane did not finish")
            status = 1
            continue
        tests = lane["tests"]
        workers = f", {lane['workers']} workers" if lane["workers"] else ""
        print(
            f"lane {lane['lane']}: {len(tests)} tests in {lane['wall_seconds']:.0f} s of wall "
            f"time ({lane['tests_seconds']:.0f} s of tests{workers})"
        )
        for test in tests:
            outcome = test["outcome"]
            outcomes["skipped" if outcome == "skipped" else outcome.split()[0]] += 1
    failed = outcomes["failed"] + outcomes["error"]
    print(f"total: {outcomes['passed']} passed, {failed} failed, {outcomes['skipped']} skipped")
    return status


if __name__ == "__main__":
    sys.exit(main())
