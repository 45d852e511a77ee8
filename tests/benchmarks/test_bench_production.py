"""The benchmarks' rows of the production features run, at tiny sizes: ``Limiter.charge`` beside
``Limiter.hit`` on memory and Redis, and the service rows with ``--access-log``,
``--envoy-headers`` and ``--dashboard`` (with its page open, and without), whose checks refuse a
server that does not run the option. Nothing here reads a timing: only that each row was
measured on the path it names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks.contenders import CHARGE, HIT, debt_algorithms, verb_contender
from benchmarks.memory.charges import charges as memory_charges
from benchmarks.memory.scenarios import Sizes
from benchmarks.redis_store.charges import charges as redis_charges
from benchmarks.redis_store.server import RedisServer
from benchmarks.redis_store.trials import RedisSizes
from benchmarks.report import Output
from benchmarks.service import load, measurement, suite
from benchmarks.service.measurement import (
    ACCESS_LOG,
    DASHBOARD,
    ENVOY_HEADERS,
    MEMORY,
    PYVOY,
    ROWS,
    RULES,
    TOKEN,
    Measurement,
    Row,
    ServiceSizes,
)
from benchmarks.service.servers import Server, environment
from benchmarks.trials import BenchmarkError

import ratekeeper as rk
from ratekeeper.testing import FakeClock
from tests.conftest import T0

DEBT = [
    "fixed_window", "sliding_counter", "bucketed_window", "token_bucket", "leaky_bucket",
    "leaky_shaper", "gcra",
]  # fmt: skip
RATIO = re.compile(r"\d+\.\d\dx")


def test_the_algorithms_charged_are_those_that_hold_a_debt() -> None:
    assert debt_algorithms() == DEBT
    for algorithm in DEBT:
        rk.Limit(10, 60, algorithm, debt=True)


@pytest.mark.parametrize(("verb", "refused_after"), [(HIT, False), (CHARGE, True)])
def test_a_verbs_contender_calls_its_verb_with_a_rate_string(
    verb: str, refused_after: bool
) -> None:
    limiter = rk.Limiter(rk.MemoryStore(clock=FakeClock(T0)))
    contender = verb_contender(limiter, verb, 3)
    assert contender.library == verb
    assert contender.hit("k", 2)
    contender.run(["k"] * 4)  # a hit counts 1 more and is refused 3 times; a charge counts 4
    look = limiter.peek("k", "3/hour")
    assert look.remaining == 0
    assert look.allowed is not refused_after  # a debt refuses even a look


def _cells(out: Output, first: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in out.lines
        if line.startswith(f"| {first}")
    ]


def test_charge_beside_hit_on_memory() -> None:
    out = Output()
    ratios = memory_charges(out, Sizes(calls=300, log_calls=50, keys=10, repeats=1))
    assert {path: sorted(by) for path, by in ratios.items()} == {
        "hot key, allow": sorted(DEBT),
        "hot key, deny": sorted(DEBT),
    }
    rows = _cells(out, "hot key")
    assert [row[1] for row in rows] == DEBT * 2
    assert all(RATIO.fullmatch(row[4]) for row in rows)


def test_charge_beside_hit_on_redis() -> None:
    out = Output()
    with RedisServer() as server:
        sizes = RedisSizes(seconds=0.01, warmup=20, async_warmup=1, repeats=1, memory_keys=10)
        ratios = redis_charges(out, server, sizes)
    assert {path: sorted(by) for path, by in ratios.items()} == {
        "allow": sorted(DEBT),
        "deny": sorted(DEBT),
    }
    rows = _cells(out, "allow") + _cells(out, "deny")
    assert [row[1] for row in rows] == DEBT * 2
    assert all(RATIO.fullmatch(row[4]) for row in rows)
    assert not any("error" in line for line in out.lines)


TINY = ServiceSizes(seconds=1.0, warmup=0.0, rounds=1, connections=4)
needs_load = pytest.mark.skipif(
    bool(load.missing()), reason=f"missing load generators: {', '.join(load.missing())}"
)


@pytest.mark.slow
@needs_load
def test_the_option_rows_beside_their_rows_without_the_option() -> None:
    options = [row for row in ROWS if row.option]
    bare = [row.without for row in options]
    rows = [row for row in ROWS if row.shape == "hello" or row in options or row in bare]
    out = Output()
    suite.run(out, TINY, rows)
    start = out.lines.index("### What each production option costs")
    costs = [line for line in out.lines[start:] if line.startswith(("| HTTP", "| gRPC"))]
    watched = f"{DASHBOARD}, page open"
    assert [(cells[0], cells[1], cells[3]) for cells in map(_split, costs)] == [
        ("HTTP", "key", ACCESS_LOG),
        ("HTTP", "key", DASHBOARD),
        ("HTTP", "key", watched),
        ("HTTP", "descriptor", DASHBOARD),
        ("HTTP", "descriptor", watched),
        ("gRPC", "descriptor", ENVOY_HEADERS),
        ("gRPC", "descriptor", DASHBOARD),
        ("gRPC", "descriptor", watched),
        ("gRPC", "refused descriptor", ENVOY_HEADERS),
        *(
            [
                ("HTTP", "key", PYVOY),
                ("gRPC", "hello", PYVOY),
                ("gRPC", "descriptor", PYVOY),  # memory
                ("gRPC", "descriptor", PYVOY),  # Redis
            ]
            if suite.pyvoy_installed()
            else []
        ),
    ]
    if suite.pyvoy_installed():  # its own table: against both hello worlds
        start = out.lines.index("### gRPC on `--server pyvoy`")
        table = [_split(line) for line in out.lines[start:] if line.startswith("| ")][2:]
        assert [(cells[0], cells[1]) for cells in table] == [
            ("hello", "hello world"),
            ("descriptor", "memory"),
            ("descriptor", "redis"),
        ]
        assert table[0][6] == "1.00x"  # the pyvoy hello over itself
    else:
        assert "(No `--server pyvoy` rows: pyvoy, the `pyvoy` extra, is not installed.)" in (
            out.lines
        )
    for cells in map(_split, costs):
        assert RATIO.fullmatch(cells[5])  # / without the option
        assert re.fullmatch(r"\d+\.\d\dx → \d+\.\d\dx", cells[8])  # / hello world


def _split(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_a_dashboard_row_runs_on_a_server_with_the_token_and_is_compared_without_it() -> None:
    assert len(TOKEN) >= 16
    watched = Row("HTTP", "key", MEMORY, DASHBOARD, watched=True)
    assert watched.arguments == (DASHBOARD, "--admin-token", TOKEN)
    assert Row("HTTP", "key", MEMORY, ACCESS_LOG).arguments == (ACCESS_LOG,)
    assert Row("HTTP", "key", MEMORY).arguments == ()
    assert watched.instance == Row("HTTP", "key", MEMORY, DASHBOARD).instance  # one server
    assert watched.without == Row("HTTP", "key", MEMORY)
    assert watched.label == "HTTP key (memory --dashboard, page open)"
    with pytest.raises(ValueError, match="only a --dashboard row has a page open"):
        Row("HTTP", "key", MEMORY, ACCESS_LOG, watched=True)
    dashboards = [row for row in ROWS if row.option == DASHBOARD]
    assert {(row.surface, row.shape, row.watched) for row in dashboards} == {
        (surface, shape, watched)
        for surface, shape in (("HTTP", "key"), ("HTTP", "descriptor"), ("gRPC", "descriptor"))
        for watched in (False, True)
    }
    assert all(row.without in ROWS for row in dashboards)


@needs_load
def test_an_option_row_on_a_server_without_the_option_stops_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(measurement, "LOG_LAG", 0.2)
    (tmp_path / "rules.yaml").write_text(RULES)
    command = [
        sys.executable, "-m", "ratekeeper.cli", "serve", "--store", "memory://",
        "--rules", "rules.yaml", "--config", "sqlite:///config.db",
    ]  # fmt: skip
    with Server("memory", command, tmp_path, None) as server:
        headers = Row("gRPC", "descriptor", MEMORY, ENVOY_HEADERS)
        with pytest.raises(BenchmarkError, match=r"response_headers_to_add are \[\], not \["):
            Measurement(headers, server, TINY, "envoy").run(None)
        logged = Row("HTTP", "key", MEMORY, ACCESS_LOG)
        with pytest.raises(
            BenchmarkError, match=r"the access log holds 0 lines for [\d,]+ answers"
        ):
            Measurement(logged, server, TINY, "access").run(None)
        recorded = Row("gRPC", "descriptor", MEMORY, DASHBOARD)
        with pytest.raises(BenchmarkError, match=r"GET /v1/top answered 404"):
            Measurement(recorded, server, TINY, "recorded").run(None)
        watched = Row("HTTP", "descriptor", MEMORY, DASHBOARD, watched=True)
        with pytest.raises(
            BenchmarkError,
            match=r"the dashboard's page asked /v1/stats (\d+) times in [\d.]+ s, answered "
            r"\{404: \1\}",
        ):
            Measurement(watched, server, TINY, "watched").run(None)


def test_the_servers_run_the_source_the_benchmark_measures(tmp_path: Path) -> None:
    """Not the copy of ratekeeper a virtualenv has installed: a run from another checkout must
    time that checkout's source in its servers too."""
    where = subprocess.run(
        [sys.executable, "-c", "import ratekeeper, benchmarks; print(ratekeeper.__file__)"],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).resolve() == Path(rk.__file__).resolve()
