"""One ``ratekeeper serve`` under more connections than it can answer, as an operator would
measure it.

    python -m tests.chaos.overload [--connections 5000] [--seconds 10] [--store redis|memory]
                                   [--client crowd|wrk] [--ramp SECONDS] [-- SERVE FLAGS...]

It starts the service (on a Redis of its own by default), then that many keep-alive
connections, each sending its next check the moment the last is answered, on one hot key
limited to ``CAPACITY`` a minute, for ``--seconds``: the crowd (``tests.chaos.crowd``, which
times each status apart but is Python, whose own loop adds to what it measures under
thousands of connections) or wrk (one thread in C: every answer timed together). Meanwhile
this process scrapes ``/metrics`` and probes ``/readyz`` and ``/healthz`` once a second each,
on connections of their own. It prints, as JSON: the answers by status and their latencies
(with wrk: all together, and how many were not 2xx), all answers but 503 together and per
second of the run (the crowd); every probe (when, what, its status or error, how long it
took); the hot key's admissions against its limit, as the service counted them
(``ratekeeper_decisions_total``); and the warnings and errors the service logged. Loopback
only, bounded in time, it stops every process it started.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from tests.servers import RedisServer
from tests.service.served import Served

#: The hot key's limit: admissions a minute.
CAPACITY = 1000
#: The probes, each once a second.
PROBES = ("/metrics", "/readyz", "/healthz")


def probe(url: str, started: float, stop: threading.Event, out: list[dict[str, Any]]) -> None:
    """Each of ``PROBES`` on ``url`` once a second until ``stop``, on a new connection each."""
    while not stop.is_set():
        round_started = time.monotonic()
        for path in PROBES:
            began = time.monotonic()
            try:
                result: int | str = httpx.get(url + path, timeout=10).status_code
            except httpx.HTTPError as error:
                result = type(error).__name__
            out.append(
                {
                    "at": round(began - started, 1),
                    "path": path,
                    "status": result,
                    "seconds": round(time.monotonic() - began, 3),
                }
            )
        stop.wait(max(0.0, 1.0 - (time.monotonic() - round_started)))


def run(
    connections: int,
    seconds: float,
    *,
    store: str = "redis",
    client: str = "crowd",
    ramp: float = 0.0,
    flags: Sequence[str] = (),
) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="overload-"))
    redis = RedisServer(directory / "redis") if store == "redis" else None
    (directory / "service").mkdir()
    log_path = directory / "serve.log"
    try:
        with log_path.open("wb") as log:
            stores = ["--store", redis.url] if redis is not None else []
            served = Served(directory / "service", *stores, *flags, stderr=log)
            try:
                result = _measure(served, directory, (connections, seconds, client, ramp))
            finally:
                served.stop()
    finally:
        if redis is not None:
            redis.stop()
    lines = log_path.read_text().splitlines()
    result["logged"] = [line for line in lines if " WARNING " in line or " ERROR " in line][:10]
    return result


def _measure(
    served: Served,
    directory: Path,
    load: tuple[int, float, str, float],  # connections, seconds, client, ramp
) -> dict[str, Any]:
    connections, seconds, client, ramp = load
    body = directory / "body.json"
    limit = {"capacity": CAPACITY, "time_window_sec": 60, "algorithm": "sliding_log"}
    body.write_text(json.dumps({"key": "hot", "limit": limit}))
    probes: list[dict[str, Any]] = []
    stop = threading.Event()
    started = time.monotonic()
    prober = threading.Thread(target=probe, args=(served.url, started, stop, probes))
    prober.start()
    try:
        if client == "wrk":
            report = _wrk(served, body, connections, seconds)
        else:
            crowd = subprocess.run(
                [sys.executable, "-m", "tests.chaos.crowd", "127.0.0.1", str(served.http),
                 "/v1/check", str(body), str(connections), str(seconds), str(ramp)],
                capture_output=True, text=True, check=True, timeout=seconds + 60,
            )  # fmt: skip
            report = json.loads(crowd.stdout)
        time.sleep(1.0)  # a probe after the load has gone
    finally:
        stop.set()
        prober.join()
    report["hot_key"] = {"capacity": CAPACITY, "admitted": _allowed(served.url)}
    report["probes"] = probes
    report["probes_failed"] = [p for p in probes if p["status"] != 200]
    report["probe_seconds_max"] = max((p["seconds"] for p in probes), default=None)
    return report


def _wrk(served: Served, body: Path, connections: int, seconds: float) -> dict[str, Any]:
    """wrk's report of ``connections`` POSTing ``body`` for ``seconds``: its latency
    percentiles, its answers that were not 2xx and its socket errors."""
    lua = Path(__file__).resolve().parents[2] / "benchmarks" / "service" / "post.lua"
    output = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{round(seconds)}s", "--timeout", "10s",
         "--latency", "-s", str(lua), f"{served.url}/v1/check"],
        capture_output=True, text=True, check=True, timeout=seconds + 60,
        env={**os.environ, "BENCH_BODY_FILE": str(body)},
    ).stdout  # fmt: skip
    found = {
        name: re.search(pattern, output, re.MULTILINE)
        for name, pattern in {
            "requests": r"^\s*(\d+) requests in",
            "not_2xx": r"Non-2xx or 3xx responses: (\d+)",
            "socket_errors": r"Socket errors: (.*)",
            "p50": r"^\s*50%\s+(\S+)",
            "p90": r"^\s*90%\s+(\S+)",
            "p99": r"^\s*99%\s+(\S+)",
            "max": r"^\s*Latency\s+\S+\s+\S+\s+(\S+)",
        }.items()
    }
    return {"wrk": {name: match.group(1) if match else None for name, match in found.items()}}


def _allowed(url: str) -> int:
    """The decisions the service at ``url`` allowed, from its ``/metrics``."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return round(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("ratekeeper_decisions_total{") and 'result="allowed"' in line
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--store", choices=("redis", "memory"), default="redis")
    parser.add_argument("--client", choices=("crowd", "wrk"), default="crowd")
    parser.add_argument("--ramp", type=float, default=0.0, help="seconds to open them over")
    parser.add_argument("flags", nargs="*", help="ratekeeper serve's flags, after --")
    options = parser.parse_args()
    result = run(
        options.connections,
        options.seconds,
        store=options.store,
        client=options.client,
        ramp=options.ramp,
        flags=options.flags,
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
