"""``ratekeeper serve`` started with envoyproxy/ratelimit's variables, as a real process: over a
Unix-socket Redis with workers, in global shadow mode, and refusing what it cannot honour."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from tests.servers import RedisServer, command, free_ports
from tests.service.served import Served

RULES = """\
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: gcra}
"""


LOGGER = "ratekeeper.decisions"


def body(user: str) -> dict[str, object]:
    return {"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": user}]}]}


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    config = tmp_path / "srv" / "ratelimit" / "config"
    config.mkdir(parents=True)
    (config / "rl.yaml").write_text(RULES)
    return tmp_path / "srv"


@pytest.fixture
def unix_redis() -> Iterator[RedisServer]:
    directory = Path(tempfile.mkdtemp(prefix="rk-sock-"))  # a socket's path is short
    server = RedisServer(directory, unix_socket=directory / "redis.sock")
    command(server.port, "CONFIG", "SET", "requirepass", "s3cret")
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


def test_two_workers_share_a_unix_socket_redis_named_by_the_references_variables(
    tmp_path: Path, runtime: Path, unix_redis: RedisServer
) -> None:
    environ = {
        "RUNTIME_ROOT": str(runtime),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "REDIS_SOCKET_TYPE": "unix",
        "REDIS_URL": str(unix_redis.unix_socket),
        "REDIS_AUTH": "s3cret",
        "CACHE_KEY_PREFIX": "team_",
        "USE_STATSD": "false",
        "RATEKEEPER_WORKERS": "2",
    }
    served = Served(tmp_path, environ=environ, stderr=subprocess.PIPE, reference_addresses=True)
    try:
        with httpx.Client(base_url=served.url, timeout=5) as client:
            answers = [client.post("/json", json=body("alice")).status_code for _ in range(5)]
    finally:
        assert served.stop() == 0
    # Each request may reach either worker: one count in Redis.
    assert answers == [200, 200, 429, 429, 429]
    client = redis.Redis(port=unix_redis.port, password="s3cret", decode_responses=True)
    try:
        keys = client.keys("*alice*")
    finally:
        client.close()
    assert len(keys) == 1 and keys[0].startswith("team_rk:")
    log = served.log()
    # Read once, by the process that starts the workers; they are given the result.
    assert log.count("reading envoyproxy/ratelimit's variables and runtime directory") == 1
    assert f"request store: unix://:***@{unix_redis.unix_socket}?db=0&prefix=team_rk" in log
    assert "Traceback" not in log


#: A text line of the log: time, level, the worker (not in the process that starts them),
#: the process, the logger, the message.
LINE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) "
    r"(?:worker=(\d+) )?pid=(\d+) ([\w.]+): (.*)"
)


def grpc_check(port: int, user: str) -> int:
    """One ``ShouldRateLimit`` of domain ``rl`` for ``user``: its overall code."""
    Descriptor = ratelimit_pb2.RateLimitDescriptor
    entries = [Descriptor.Entry(key="user", value=user)]
    sent = rls_pb2.RateLimitRequest(domain="rl", descriptors=[Descriptor(entries=entries)])
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = rls_pb2_grpc.RateLimitServiceStub(channel).ShouldRateLimit(sent, timeout=10)
    return int(answer.overall_code)


def test_the_references_debug_level_logs_each_decision_in_the_worker_that_made_it(
    tmp_path: Path, runtime: Path, redis_server: RedisServer
) -> None:
    """``LOG_LEVEL=debug``, as both of the reference's compose files set it, with two workers:
    a line per descriptor decided, HTTP's, gRPC's and nginx's, by the worker that decided it,
    without the key; no line of grpc's or any other library's; and every line of the start
    said once by the process it concerns."""
    environ = {
        "RUNTIME_ROOT": str(runtime),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": f"127.0.0.1:{redis_server.port}",
        "CACHE_KEY_PREFIX": f"{tmp_path.name}_",
        "USE_STATSD": "false",
        "LOG_LEVEL": "debug",
        "RATEKEEPER_WORKERS": "2",
    }
    served = Served(tmp_path, environ=environ, stderr=subprocess.PIPE, reference_addresses=True)
    nginx = {"X-RateLimit-Domain": "rl", "X-Real-IP": "10.0.0.9", "X-User": "carol-secret"}
    try:
        with httpx.Client(base_url=served.url, timeout=5) as client:
            assert client.post("/json", json=body("alice-secret")).status_code == 200
            assert client.get("/v1/nginx", headers=nginx).status_code == 200
        assert grpc_check(served.grpc, "bob-secret") == rls_pb2.RateLimitResponse.OK
    finally:
        assert served.stop() == 0
    log = served.log()
    lines = [LINE.fullmatch(text) for text in log.splitlines()]
    assert all(lines), [
        text for text, found in zip(log.splitlines(), lines, strict=True) if not found
    ]
    parsed = [found.groups() for found in lines if found]
    # The process that starts the workers names only its pid; each worker its number too.
    supervisor = str(served.process.pid)
    numbers = {pid: worker for _, worker, pid, _, _ in parsed if pid != supervisor}
    assert sorted(numbers.values()) == ["1", "2"], numbers
    assert all((worker is None) == (pid == supervisor) for _, worker, pid, _, _ in parsed)
    # ratekeeper's and uvicorn's lines only: none of grpc's ("Loaded running loop"), asyncio's,
    # redis's
    assert {logger.split(".")[0] for *_, logger, _ in parsed} == {"ratekeeper", "uvicorn"}
    decided = [(level, message) for level, _, _, logger, message in parsed if logger == LOGGER]
    fields = 'rule=user limit="2/hour (gcra)" result=allowed remaining=1'
    assert sorted(decided) == sorted(
        [
            ("DEBUG", f"allowed domain=rl descriptor=0 {fields}"),  # /json
            ("DEBUG", f"allowed domain=rl descriptor=0 {fields}"),  # gRPC
            ("DEBUG", "allowed domain=rl descriptor=0 rule=none limit=none result=allowed"),
            ("DEBUG", f"allowed domain=rl descriptor=1 {fields}"),  # nginx's user
            ("DEBUG", "allowed domain=rl descriptor=2 rule=none limit=none result=allowed"),
            ("DEBUG", "allowed domain=rl descriptor=3 rule=none limit=none result=allowed"),
        ]
    )
    assert "secret" not in log  # no key, no descriptor value
    # Each line of the start once per process: the configuration store by each worker only.
    said = Counter((pid, message) for _, _, pid, logger, message in parsed if logger != LOGGER)
    assert [line for line, times in said.items() if times > 1] == []
    stores = [pid for (pid, message) in said if message.startswith("configuration store:")]
    assert sorted(stores) == sorted(numbers)


def decisions(url: str) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return {
        (sample.labels["domain"], sample.labels["result"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "ratekeeper_decisions_total"
    }


def test_shadow_mode_lets_every_refusal_through_and_counts_it(
    tmp_path: Path, runtime: Path
) -> None:
    environ = {
        "RUNTIME_ROOT": str(runtime),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "RATEKEEPER_STORE": "memory://",
        "SHADOW_MODE": "true",
        "USE_STATSD": "false",
    }
    served = Served(tmp_path, environ=environ, stderr=subprocess.PIPE, reference_addresses=True)
    try:
        with httpx.Client(base_url=served.url, timeout=5) as client:
            answers = [client.post("/json", json=body("bob")) for _ in range(4)]
            counted = decisions(served.url)
    finally:
        assert served.stop() == 0
    assert [answer.status_code for answer in answers] == [200, 200, 200, 200]
    assert [answer.json()["statuses"][0].get("limitRemaining", 0) for answer in answers] == [
        1,
        0,
        0,
        0,
    ]
    assert counted == {("rl", "allowed"): 2, ("rl", "shadowed"): 2}
    log = served.log()
    assert "shadow mode: every refusal is let through, counted as shadowed" in log
    assert log.count("configuration store: sqlite://:memory:") == 1  # said once
    assert "$REDIS_URL" not in log  # RATEKEEPER_STORE won: the Redis variables are not read


def test_a_variable_ratekeeper_cannot_honour_stops_the_start(tmp_path: Path, runtime: Path) -> None:
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")},
        "RUNTIME_ROOT": str(runtime),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "BACKEND_TYPE": "memcache",
        "CONFIG_TYPE": "GRPC_XDS_SOTW",
    }
    result = subprocess.run(
        [sys.executable, "-m", "ratekeeper.cli", "serve"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert [line.split(":", 2)[1].strip() for line in lines] == [
        "$BACKEND_TYPE=memcache",
        "$CONFIG_TYPE=GRPC_XDS_SOTW",
    ]
    assert all(line.startswith("error: ") and "not supported" in line for line in lines)


def test_merge_domain_config_lets_two_files_share_a_domain(tmp_path: Path, runtime: Path) -> None:
    config = runtime / "ratelimit" / "config"
    (config / "rl-more.yaml").write_text(
        "domain: rl\ndescriptors:\n"
        "  - key: team\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
    )
    base = {"RUNTIME_ROOT": str(runtime), "RUNTIME_SUBDIRECTORY": "ratelimit"}
    environ = {**base, "RATEKEEPER_STORE": "memory://", "USE_STATSD": "false"}
    http, grpc = free_ports(2)  # never the reference's 0.0.0.0:8080 and 8081
    addresses = {"HOST": "127.0.0.1", "PORT": str(http), "GRPC_HOST": "127.0.0.1"}
    refused = subprocess.run(
        [sys.executable, "-m", "ratekeeper.cli", "serve"],
        cwd=tmp_path,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")},
            **environ,
            **addresses,
            "GRPC_PORT": str(grpc),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1
    assert f"{config / 'rl.yaml'}: domain: duplicate domain 'rl'" in refused.stderr
    environ["MERGE_DOMAIN_CONFIG"] = "true"
    served = Served(tmp_path, environ=environ, reference_addresses=True)
    try:
        with httpx.Client(base_url=served.url, timeout=5) as client:
            team = {"domain": "rl", "descriptors": [{"entries": [{"key": "team", "value": "a"}]}]}
            answers = [client.post("/json", json=team).status_code for _ in range(2)]
            answers += [client.post("/json", json=body("carol")).status_code for _ in range(3)]
    finally:
        assert served.stop() == 0
    assert answers == [200, 429, 200, 200, 429]
