"""Each process of ``ratekeeper serve`` that decides tunes Python's garbage collector once its
app is built (``runtime.collector``): what was built frozen, the thresholds raised; a library
user's process, which builds the app itself, is left as it is.

``tune`` runs in a Python of its own here, so that the test process's collector stays
Python's. The servers are real ``ratekeeper serve`` processes on Redis, on both stacks, with one
worker and with two: each process that serves logs its tuning once (at debug level).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ratekeeper.service.runtime.collector import YOUNGEST
from tests.gateways import pyvoy_binary
from tests.servers import RedisServer
from tests.service.served import Served

TUNED = "garbage collector: "


def python(code: str) -> list[str]:
    """What ``code`` prints, run by a Python of its own, line by line."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.splitlines()


@pytest.mark.parametrize("server", ["uvicorn", "pyvoy"])
def test_tune_freezes_what_is_alive_and_raises_the_youngest_threshold(server: str) -> None:
    threshold, frozen = python(
        "import gc\n"
        "from ratekeeper.service.runtime import collector\n"
        f"collector.tune({server!r})\n"
        "print(gc.get_threshold())\n"
        "print(gc.get_freeze_count())\n"
    )
    assert threshold == str((YOUNGEST[server], 10, 10))
    assert YOUNGEST[server] >= 10_000
    assert int(frozen) > 1_000  # the modules imported, at least


def test_a_library_users_app_leaves_the_collector_as_it_is(tmp_path: Path) -> None:
    before, after, frozen = python(
        "import gc\n"
        "before = gc.get_threshold()\n"
        "from ratekeeper.service.runtime.app import build_app\n"
        "from ratekeeper.service.runtime.settings import Settings\n"
        f"build_app(Settings(config='sqlite://:memory:', rules=({str(tmp_path)!r},)))\n"
        "print(before)\n"
        "print(gc.get_threshold())\n"
        "print(gc.get_freeze_count())\n"
    )
    assert after == before
    assert frozen == "0"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("server", "workers"), [("uvicorn", 1), ("uvicorn", 2), ("pyvoy", 1)], ids=str
)
def test_each_serving_process_tunes_its_collector_once(
    tmp_path: Path, server: str, workers: int
) -> None:
    if server == "pyvoy" and pyvoy_binary() is None:
        pytest.skip("pyvoy is not installed (the pyvoy extra)")
    with RedisServer(tmp_path / "redis") as redis, (tmp_path / "serve.log").open("wb") as log:
        served = Served(
            tmp_path,
            "--server", server, "--workers", str(workers), "--log-level", "debug",
            "--store", redis.url, "--config", "sqlite://:memory:",
            stderr=log,
        )  # fmt: skip
        assert served.stop() == 0
    lines = [line for line in (tmp_path / "serve.log").read_text().splitlines() if TUNED in line]
    assert len(lines) == workers, lines
    for line in lines:
        frozen = line.split(TUNED, 1)[1].split(" objects frozen")[0]
        assert int(frozen.replace(",", "")) > 10_000, line  # the app and all it holds
        assert f"collected every {YOUNGEST[server]:,} allocations" in line
