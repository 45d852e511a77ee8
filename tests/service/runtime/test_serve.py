"""``ratekeeper serve`` as a real process: it starts, logs what it opened, answers over TCP,
and on SIGTERM finishes the requests in flight and exits 0. Also: importing ratekeeper brings
no web framework in, and a missing extra is named."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratekeeper.core.errors import MissingExtraError
from ratekeeper.service.runtime.settings import EXAMPLE_RULES
from tests.servers import RedisServer, free_port, wait_until
from tests.service.served import Served

TOKEN = "serve-token-0123456789abcdef"
CHECK = {
    "domain": "example",
    "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}],
}


def _serve_once(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ratekeeper serve`` with ``args``, expected to stop by itself: its exit and output."""
    return subprocess.run(
        [sys.executable, "-m", "ratekeeper.cli", "serve", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _start_slow_request(port: int, body: bytes) -> socket.socket:
    """A request to /v1/check whose headers and half its body are sent: in flight."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (
        f"POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body[: len(body) // 2])
    return sock


def _finish(sock: socket.socket, body: bytes) -> tuple[int, dict[str, object]]:
    sock.sendall(body[len(body) // 2 :])
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def test_serve_answers_and_stops_gracefully(tmp_path: Path) -> None:
    served = Served(tmp_path, environ={"RATEKEEPER_ADMIN_TOKEN": TOKEN}, stderr=subprocess.PIPE)
    port, base, process = served.http, served.url, served.process
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            remaining = [
                client.post("/v1/check", json=CHECK).json()["statuses"][0]["remaining"]
                for _ in range(3)
            ]
            assert remaining == [99, 98, 97]
            auth = {"Authorization": f"Bearer {TOKEN}"}
            put = client.put(
                "/v1/overrides/user:1", json={"capacity": 1, "time_window_sec": 60}, headers=auth
            )
            assert put.status_code == 200
            assert [
                client.post("/v1/check", json={"key": "user:1"}).status_code for _ in range(2)
            ] == [200, 429]
            assert client.post("/json", json=CHECK).json()["overallCode"] == "OK"

            body = json.dumps(CHECK).encode()
            in_flight = [_start_slow_request(port, body) for _ in range(3)]
            assert client.get("/healthz").status_code == 200  # the server has read them meanwhile
        assert (tmp_path / "ratekeeper.db").exists()

        process.send_signal(signal.SIGTERM)
        answers = [_finish(sock, body) for sock in in_flight]
        assert [status for status, _ in answers] == [200, 200, 200]
        assert sorted(one["statuses"][0]["remaining"] for _, one in answers) == [93, 94, 95]  # type: ignore[index]
        assert process.wait(timeout=30) == 0
    finally:
        served.kill()
    log = served.log()
    assert f"loaded 3 rules in 1 domain from {EXAMPLE_RULES}" in log
    assert "request store: memory://" in log
    assert "configuration store: sqlite:///ratekeeper.db" in log
    assert f"listening on http://127.0.0.1:{port}" in log
    assert "gRPC (Envoy's rate-limit protocol, health) listening on 127.0.0.1:" in log
    assert "Traceback" not in log
    assert TOKEN not in log


def test_serve_refuses_bad_settings(tmp_path: Path) -> None:
    result = _serve_once(tmp_path, "--workers", "2", "--http", "nowhere")
    assert result.returncode == 1
    assert "error: --http: expected HOST:PORT" in result.stderr
    assert "each worker would count alone" in result.stderr


def test_serve_refuses_a_grpc_address_another_service_listens_on(tmp_path: Path) -> None:
    """Not shared silently, as gRPC's SO_REUSEPORT would: each would get half of the calls."""
    first = Served(tmp_path)
    try:
        result = _serve_once(
            tmp_path, "--http", f"127.0.0.1:{free_port()}", "--grpc", f"127.0.0.1:{first.grpc}"
        )
    finally:
        assert first.stop() == 0
    assert result.returncode == 3
    assert f"could not listen on gRPC 127.0.0.1:{first.grpc}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_grpc_port_whose_last_connections_are_closing_is_listened_on(tmp_path: Path) -> None:
    """A service restarted in place (a rolling restart) finds its gRPC port's last connections
    in TIME_WAIT, the old service having closed them first: the port is free, and taken."""
    port = free_port()
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server's side closes first: its end waits in TIME_WAIT
        client.close()
    with pytest.raises(OSError), socket.socket() as plain:  # as the port was probed before
        plain.bind(("127.0.0.1", port))
    served = Served(tmp_path, grpc=f"127.0.0.1:{port}")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            answer = health.Check(health_pb2.HealthCheckRequest(), timeout=10)
    finally:
        assert served.stop() == 0
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_serve_refuses_a_sqlite_configuration_store_it_cannot_open(tmp_path: Path) -> None:
    """Served, it would ignore every override for ever: refused at once, in one line."""
    missing = tmp_path / "no such directory" / "ratekeeper.db"
    result = _serve_once(
        tmp_path,
        *("--config", f"sqlite:///{missing}"),
        *("--http", f"127.0.0.1:{free_port()}", "--grpc", f"127.0.0.1:{free_port()}"),
    )
    assert result.returncode == 3
    assert "could not open the configuration store: SQLite configuration store" in result.stderr
    assert str(missing) in result.stderr
    assert "Traceback" not in result.stderr


def test_importing_ratekeeper_brings_no_web_framework() -> None:
    code = (
        "import sys, ratekeeper, ratekeeper.cli, ratekeeper.service.runtime.settings; "
        "print(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('starlette', 'uvicorn', 'httpx')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from ratekeeper.service.runtime import app

    monkeypatch.setitem(sys.modules, "uvicorn", None)
    with pytest.raises(MissingExtraError, match=r"ratekeeper\[server\]"):
        app.require_server_extra()


def test_workers_share_a_redis_store(tmp_path: Path, redis_server: RedisServer) -> None:
    url = redis_server.url
    environ = {"RATEKEEPER_WORKERS": "2", "RATEKEEPER_STORE": url, "RATEKEEPER_LOG_FORMAT": "json"}
    served = Served(tmp_path, environ=environ, stderr=subprocess.PIPE)
    port, base = served.http, served.url
    try:
        check = {"key": f"workers:{port}", "limit": "5/minute"}
        with httpx.Client(base_url=base, timeout=10) as client:
            codes = []
            for _ in range(7):  # a new connection each time: any worker may answer
                codes.append(httpx.post(f"{base}/v1/check", json=check, timeout=10).status_code)
            assert codes == [200] * 5 + [429] * 2
            assert client.get("/healthz").status_code == 200
        assert served.stop() == 0
    finally:
        served.kill()
    lines = [json.loads(line) for line in served.log().splitlines()]
    messages = [line["message"] for line in lines]
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    assert f"listening on http://127.0.0.1:{port} with 2 workers" in messages
    assert messages.count(f"request store: {url}") == 2
    assert messages[-1] == "stopped"  # by the supervisor, once its workers have
    assert not any("POST /v1/check" in message for message in messages)  # no access log


def test_workers_share_the_overrides_of_an_in_memory_configuration_store(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """``--config sqlite://:memory:`` (what ``--compat envoy-ratelimit`` chooses) with workers:
    they share one configuration store for the run, so an override put through one worker is
    the limit every worker applies, and every worker says so at start."""
    token = "overrides-admin-token-0123456789"
    environ = {
        "RATEKEEPER_WORKERS": "2",
        "RATEKEEPER_STORE": redis_server.url,
        "RATEKEEPER_CONFIG": "sqlite://:memory:",
        "RATEKEEPER_ADMIN_TOKEN": token,
        "RATEKEEPER_LOG_FORMAT": "json",
    }
    served = Served(tmp_path, environ=environ, stderr=subprocess.PIPE)
    base, key = served.url, f"user:shared-{served.http}"
    try:
        put = httpx.put(
            f"{base}/v1/overrides/{key}",
            json={"capacity": 3, "time_window_sec": 3600},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert put.status_code == 200, put.text
        # A new connection each time: both workers answer (no rule, no default: a worker
        # without the override would let every check through).
        codes = [
            httpx.post(f"{base}/v1/check", json={"key": key}, timeout=10).status_code
            for _ in range(12)
        ]
        assert codes == [200] * 3 + [429] * 9
        for _ in range(4):  # the run's directory holds the store beside the workers' metrics
            scraped = httpx.get(f"{base}/metrics", timeout=10)
            assert scraped.status_code == 200, scraped.text
            assert "ratekeeper_decisions_total" in scraped.text
        assert served.stop() == 0
    finally:
        served.kill()
    messages = [json.loads(line)["message"] for line in served.log().splitlines()]
    shared = [one for one in messages if one.startswith("configuration store: sqlite:///")]
    assert len(shared) == 2, messages
    assert all("this run's: the workers share the overrides" in one for one in shared)


def test_a_service_without_rules_warns_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.service.asgi import AppClient, settings_app

    with caplog.at_level(logging.WARNING, logger="ratekeeper.service"):
        app = settings_app(rules=(str(tmp_path),), config="sqlite://:memory:")
        with AppClient(app) as client:
            assert client.get("/healthz").status_code == 200
    assert [record.getMessage() for record in caplog.records] == [
        f"no rules loaded from {tmp_path}: every request is allowed until rules are added"
    ]


def test_debt_says_at_start_which_leased_rules_it_decides_exactly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``--debt`` counts every hit in the store, where a slice cannot hold a debt: the leased
    rules are then decided exactly, and the start says which."""
    from tests.service.asgi import AppClient, settings_app

    (tmp_path / "rules.yaml").write_text(
        "domain: api\n"
        "descriptors:\n"
        "  - key: user\n"
        "    rate_limit: {unit: minute, requests_per_unit: 100, sync: leased}\n"
        "  - key: plan\n"
        "    rate_limit: {unit: minute, requests_per_unit: 5, name: per_plan}\n"
    )
    for debt in (False, True):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ratekeeper.service"):
            app = settings_app(rules=(str(tmp_path),), config="sqlite://:memory:", debt=debt)
            with AppClient(app) as client:
                assert client.get("/healthz").status_code == 200
        said = [record.getMessage() for record in caplog.records]
        assert said == (
            [
                "--debt counts every hit in the store, so this rule is decided exactly, "
                "not leased: api/user"
            ]
            if debt
            else []
        )


def test_serve_refuses_an_http_address_it_cannot_listen_on_in_one_line(tmp_path: Path) -> None:
    grpc = ("--grpc", f"127.0.0.1:{free_port()}")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        result = _serve_once(tmp_path, "--http", f"127.0.0.1:{taken}", *grpc)
    assert result.returncode == 3
    (line,) = result.stderr.splitlines()
    assert " ERROR pid=" in line and line.endswith(
        f" ratekeeper.service: could not listen on HTTP 127.0.0.1:{taken} (--http): "
        "Address already in use"
    )
    assert "listening" not in result.stdout + result.stderr

    result = subprocess.run(
        [
            *(sys.executable, "-m", "ratekeeper.cli", "serve"),
            *("--compat", "envoy-ratelimit", "--rules", EXAMPLE_RULES, *grpc),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            **_environ(),
            "HOST": "not_a_host",
            "PORT": str(free_port()),
            "REDIS_SOCKET_TYPE": "tcp",
            "REDIS_URL": "127.0.0.1:6379",
        },
    )
    assert result.returncode == 3
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1
    assert "could not listen on HTTP not_a_host:" in errors[0]
    assert "(--http (from $HOST, $PORT))" in errors[0]
    assert "listening" not in result.stdout + result.stderr


def _environ() -> dict[str, str]:
    """This process's environment, less any variable of the reference set around the test."""
    return {
        name: value
        for name, value in os.environ.items()
        if name.startswith(("PATH", "PYTHON", "HOME"))
    }


def test_a_killed_service_leaves_none_of_its_workers(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """The tests' harness stops a service by pid: killed (as a test that fails kills it), its
    workers go with it rather than serving on, orphaned, after the test."""
    from tests.service.workers import worker_pids

    served = Served(tmp_path, "--workers", "2", "--store", redis_server.url)
    pids = worker_pids(served)
    assert len(pids) == 2
    served.kill()

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"

    wait_until(lambda: all(gone(pid) for pid in pids), 10, "the workers' end")
