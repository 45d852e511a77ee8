"""The service benchmark's load generators: wrk for HTTP, h2load for gRPC, nghttp to check.

``wrk(url, body, ...)`` POSTs one JSON body over ``connections`` keep-alive connections (the
Lua script ``post.lua`` beside this file reads the body from the file named by
``BENCH_BODY_FILE``); ``h2load(url, data, ...)`` POSTs one gRPC message (``grpc_frame``: the
5-byte gRPC prefix and the serialized protobuf) on ``connections`` HTTP/2 connections, one
stream each (or ``streams``), with the headers a gRPC client sends. Both run for ``seconds``
(whole seconds), on the CPUs ``cpus`` (through ``taskset``), and return a ``Load``: requests,
requests per second, p50 and p99 latency, and what was not a success. ``grpc_status(url,
data)`` sends the same request h2load sends with nghttp and returns the ``grpc-status``
trailer the server answered, which h2load does not read.

Every tool is a Debian package (``wrk``, ``nghttp2-client``); ``missing()`` names those not
installed, and ``scripts/bench.sh`` installs them.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: The Debian package of each tool.
PACKAGES = {"wrk": "wrk", "h2load": "nghttp2-client", "nghttp": "nghttp2-client"}
LUA = Path(__file__).with_name("post.lua")
GRPC_HEADERS = ("content-type: application/grpc", "te: trailers")


class LoadError(RuntimeError):
    """A load generator failed, or the server answered something other than what was meant."""


@dataclass(frozen=True)
class Load:
    """One timed run: completed requests, their rate, latency percentiles (seconds), and the
    requests that were not a success (a status other than the one expected, socket errors)."""

    requests: int
    rate: float
    p50: float
    p99: float
    failures: int
    detail: str = ""


def missing() -> list[str]:
    """The Debian packages of the tools that are not installed."""
    return sorted({package for tool, package in PACKAGES.items() if shutil.which(tool) is None})


def grpc_frame(message: bytes) -> bytes:
    """``message`` as one gRPC length-prefixed message: not compressed, 4-byte length."""
    return struct.pack(">?I", False, len(message)) + message


def _pinned(command: list[str], cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus, *command] if cpus else command


def _run(command: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        raise LoadError(f"{command[0]} did not end within {timeout:.0f} s") from None
    if done.returncode != 0:
        raise LoadError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _duration(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def _field(pattern: str, output: str, tool: str) -> re.Match[str]:
    found = re.search(pattern, output, re.MULTILINE)
    if found is None:
        raise LoadError(f"{tool}'s output has no {pattern!r}:\n{output}")
    return found


def wrk(
    url: str,
    body: bytes,
    *,
    connections: int,
    seconds: float,
    cpus: str | None = None,
    expect_ok: bool = True,
    headers: Sequence[str] = (),
    delay_ms: float = 0.0,
) -> Load:
    """POST ``body`` (JSON) to ``url`` for ``seconds`` on ``connections`` connections, one
    thread, with ``headers`` (``"name: value"``) too. ``expect_ok``: every answer is meant to
    be 2xx; else every one is meant not to be (a refusal), and the 2xx answers are the
    failures. ``delay_ms``: each connection pauses a random time of that mean before each
    request (``post.lua``), which holds the rate near ``connections * 1000 / (delay_ms +
    latency)``; 0, none (as fast as the server answers)."""
    with tempfile.NamedTemporaryFile(prefix="ratekeeper-bench-", suffix=".json") as file:
        file.write(body)
        file.flush()
        command = [
            "wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s",
            "--latency", "-s", str(LUA),
            *(option for header in headers for option in ("-H", header)), url,
        ]  # fmt: skip
        env = {**os.environ, "BENCH_BODY_FILE": file.name, "BENCH_DELAY_MS": f"{delay_ms:.3f}"}
        output = _run(_pinned(command, cpus), seconds + 30, env)
    return parse_wrk(output, expect_ok=expect_ok)


def parse_wrk(output: str, *, expect_ok: bool = True) -> Load:
    """The ``Load`` of wrk's ``--latency`` report (see ``wrk``)."""
    requests = int(_field(r"^\s*(\d+) requests in", output, "wrk").group(1))
    rate = float(_field(r"^Requests/sec:\s*([\d.]+)", output, "wrk").group(1))
    p50 = _duration(_field(r"^\s*50%\s+(\S+)", output, "wrk").group(1))
    p99 = _duration(_field(r"^\s*99%\s+(\S+)", output, "wrk").group(1))
    found = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    refused = int(found.group(1)) if found else 0
    errors = re.search(r"Socket errors: (.*)", output)
    failures = refused if expect_ok else requests - refused
    detail = f"socket errors: {errors.group(1)}" if errors else ""
    if errors:
        failures += sum(int(n) for n in re.findall(r"\d+", errors.group(1)))
    return Load(requests, rate, p50, p99, failures, detail)


def h2load(
    url: str,
    data: bytes,
    *,
    connections: int,
    seconds: float,
    cpus: str | None = None,
    streams: int = 1,
) -> Load:
    """POST the gRPC message ``data`` (framed) to ``url`` for ``seconds``, on ``connections``
    HTTP/2 connections with ``streams`` streams in flight each, one thread. Latencies come
    from h2load's per-request log."""
    with tempfile.TemporaryDirectory(prefix="ratekeeper-bench-") as directory:
        data_file, log_file = Path(directory, "request.bin"), Path(directory, "requests.log")
        data_file.write_bytes(data)
        command = [
            "h2load", "-t1", f"-c{connections}", f"-m{streams}",
            f"-D{max(1, round(seconds))}", f"--log-file={log_file}", "-d", str(data_file),
            *(option for header in GRPC_HEADERS for option in ("-H", header)), url,
        ]  # fmt: skip
        output = _run(_pinned(command, cpus), seconds + 30)
        latencies = [int(line.split("\t")[2]) for line in log_file.read_text().splitlines()]
    return parse_h2load(output, latencies)


def parse_h2load(output: str, latencies: list[int]) -> Load:
    """The ``Load`` of h2load's report and the latencies (µs) of its per-request log."""
    done = _field(
        r"^requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, "
        r"(\d+) errored, (\d+) timeout",
        output,
        "h2load",
    )
    rate = float(_field(r"^finished in \S+, ([\d.]+) req/s", output, "h2load").group(1))
    codes = _field(r"^status codes: (\d+) 2xx", output, "h2load")
    requests, succeeded = int(done.group(2)), int(codes.group(1))
    # A stream cut by the end of the run may have had its 2xx headers counted but not its end:
    # its 2xx can outnumber the requests done.
    failures = max(0, requests - succeeded) + sum(int(done.group(n)) for n in (4, 5, 6))
    if not latencies:
        raise LoadError(f"h2load completed no request:\n{output}")
    ordered = sorted(latencies)
    return Load(
        requests,
        rate,
        percentile(ordered, 50) / 1e6,
        percentile(ordered, 99) / 1e6,
        failures,
        "" if not failures else output.strip().splitlines()[-1],
    )


def percentile(ordered: Sequence[int], p: float) -> float:
    """The ``p``-th percentile of the sorted ``ordered`` (nearest rank)."""
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[rank - 1])


def grpc_status(url: str, data: bytes) -> str:
    """The ``grpc-status`` the server answers to the request h2load sends (nghttp, once)."""
    with tempfile.NamedTemporaryFile(prefix="ratekeeper-bench-", suffix=".bin") as file:
        file.write(data)
        file.flush()
        command = ["nghttp", "-v", "-d", file.name]
        for header in GRPC_HEADERS:
            command += ["-H", header]
        done = subprocess.run([*command, url], capture_output=True, timeout=30, check=False)
    text = done.stdout.decode("utf-8", "replace")
    found = re.findall(r"recv \(stream_id=\d+\) grpc-status: (\d+)", text)
    if done.returncode != 0 or not found:
        raise LoadError(f"nghttp found no grpc-status in the answer of {url}:\n{text[-2000:]}")
    return str(found[-1])
