"""The gateways' deployment files (``deploy/``) on a real Envoy and a real nginx, and the
fixtures that run them (``tests/gateways.py``).

ratekeeper's decision service is not part of these tests: where a gateway must reach it,
its address is a closed port (the service down) or, for nginx, a small real HTTP server
that answers 200 or 403 as a decision endpoint would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.gateways import (
    ENVOY_YAML,
    NGINX_CONF,
    PORT,
    EnvoyServer,
    NginxServer,
    UpstreamServer,
    envoy_config,
    envoy_validate,
    http_request,
    nginx_config,
    nginx_test,
    render,
    running_in_group,
)
from tests.servers import free_port

FAIL_OPEN_LINE = "error_page 500 = @fail_open;  # fail open; delete this line to fail closed"


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def refused(port: int) -> bool:
    try:
        http_request(port, "/", timeout=1.0)
    except ConnectionRefusedError:
        return True
    return False


@pytest.fixture
def app(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "app", "app")
    yield server
    server.stop()


@pytest.fixture
def auth(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "auth", "auth")
    yield server
    server.stop()


# -- the small upstream ------------------------------------------------------------------------


def test_app_upstream_echoes_what_it_received(app: UpstreamServer) -> None:
    answer = http_request(
        app.port, "/items?page=2", method="POST", headers={"X-User": "alice"}, body=b"hello"
    )
    assert answer.status == 200
    seen = answer.json()
    assert (seen["method"], seen["path"], seen["body"]) == ("POST", "/items?page=2", "hello")
    assert seen["headers"]["x-user"] == "alice"
    assert app.requests() == [seen]
    assert app.url == f"http://127.0.0.1:{app.port}"


def test_auth_upstream_answers_by_the_original_uri(auth: UpstreamServer) -> None:
    allowed = http_request(auth.port, "/v1/nginx", headers={"X-Original-URI": "/items"})
    assert allowed.status == 200
    assert allowed.headers["x-ratelimit-remaining"] == "9"
    assert "retry-after" not in allowed.headers
    denied = http_request(auth.port, "/v1/nginx", headers={"X-Original-URI": "/deny?x=1"})
    assert denied.status == 403
    assert (denied.headers["x-ratelimit-remaining"], denied.headers["retry-after"]) == ("0", "60")
    assert http_request(auth.port, "/status/429").status == 429
    assert [r["headers"].get("x-original-uri") for r in auth.requests()] == [
        "/items",
        "/deny?x=1",
        None,
    ]


def test_upstream_stops_by_pid(tmp_path: Path) -> None:
    server = UpstreamServer(tmp_path / "app")
    pid, port = server.pid, server.port
    server.stop()
    assert server.process is None
    assert gone(pid)
    assert refused(port)


# -- Envoy -------------------------------------------------------------------------------------


def test_shipped_envoy_config_validates() -> None:
    result = envoy_validate(ENVOY_YAML)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout


def test_shipped_envoy_retries_never_cut_a_try_short_of_the_filters_timeout() -> None:
    """Envoy gives each try of a retried rate-limit call ``retry_back_off.max_interval`` as its
    timeout (ten times ``base_interval`` when unset): below the filter's own timeout, a burst's
    slower answers would be cut off and fail (504)."""
    config = yaml.safe_load(ENVOY_YAML.read_text())
    (listener,) = config["static_resources"]["listeners"]
    (manager,) = listener["filter_chains"][0]["filters"]
    filters = {one["name"]: one["typed_config"] for one in manager["typed_config"]["http_filters"]}
    ratelimit = filters["envoy.filters.http.ratelimit"]
    retries = ratelimit["rate_limit_service"]["grpc_service"]["retry_policy"]
    assert retries["retry_back_off"]["max_interval"] == ratelimit["timeout"] == "0.25s"


@pytest.mark.parametrize("failure_mode_deny", [False, True])
def test_rendered_envoy_config_changes_only_the_marked_values(
    tmp_path: Path, failure_mode_deny: bool
) -> None:
    text = envoy_config(
        upstream_port=1111, ratekeeper_port=2222, failure_mode_deny=failure_mode_deny
    )
    shipped = ENVOY_YAML.read_text().splitlines()
    changed = [new for old, new in zip(shipped, text.splitlines(), strict=True) if old != new]
    assert [line.strip() for line in changed] == [
        "socket_address: {address: 127.0.0.1, port_value: {{admin_port}}}  # <- SET admin",
        "socket_address: {address: 127.0.0.1, port_value: {{port}}}  # <- SET listener",
        *(["failure_mode_deny: true"] if failure_mode_deny else []),
        "socket_address: {address: 127.0.0.1, port_value: 1111}  # <- SET application",
        "socket_address: {address: 127.0.0.1, port_value: 2222}  # <- SET ratekeeper",
    ]
    config = tmp_path / "envoy.yaml"
    config.write_text(text.replace("{{port}}", "10001").replace("{{admin_port}}", "10002"))
    result = envoy_validate(config)
    assert result.returncode == 0, result.stdout + result.stderr


def test_render_refuses_a_value_not_found_once() -> None:
    with pytest.raises(ValueError, match="occurs 0 times"):
        render("listen 80;", {"listen 8000;": "listen 1;"})
    with pytest.raises(ValueError, match="occurs 2 times"):
        render("a a", {"a": "b"})


def test_envoy_fails_open_when_the_rate_limit_service_is_down(
    tmp_path: Path, app: UpstreamServer
) -> None:
    closed = free_port()
    config = envoy_config(upstream_port=app.port, ratekeeper_port=closed, failure_mode_deny=False)
    envoy = EnvoyServer(tmp_path / "envoy", config)
    try:
        answer = http_request(envoy.port, "/items?page=2", headers={"X-User": "alice"})
        assert answer.status == 200
        seen = answer.json()
        assert (seen["method"], seen["path"]) == ("GET", "/items?page=2")
        assert seen["headers"]["x-user"] == "alice"
        assert "x-ratelimit-limit" not in answer.headers
        assert [r["path"] for r in app.requests()] == ["/items?page=2"]
        assert f"port_value: {closed}" in envoy.config
    finally:
        envoy.stop()


def test_envoy_fails_closed_with_500_when_asked_to(tmp_path: Path, app: UpstreamServer) -> None:
    config = envoy_config(
        upstream_port=app.port, ratekeeper_port=free_port(), failure_mode_deny=True
    )
    envoy = EnvoyServer(tmp_path / "envoy", config)
    try:
        answer = http_request(envoy.port, "/items", headers={"X-User": "alice"})
        assert answer.status == 500
        assert app.requests() == []
    finally:
        envoy.stop()


def test_envoy_answers_as_itself_and_stops_by_pid(tmp_path: Path, app: UpstreamServer) -> None:
    config = envoy_config(upstream_port=app.port, ratekeeper_port=free_port())
    first = EnvoyServer(tmp_path / "first", config)
    second = EnvoyServer(tmp_path / "second", config)  # at the same time: its own base id
    try:
        assert len({first.port, first.admin_port, second.port, second.admin_port}) == 4
        assert first.base_id != second.base_id
        assert http_request(first.admin_port, "/ready").body == b"LIVE\n"
        assert http_request(second.port, "/").status == 200
        assert first.url == f"http://127.0.0.1:{first.port}"
        assert first.admin_url == f"http://127.0.0.1:{first.admin_port}"
    finally:
        pids = [first.pid, second.pid]
        ports = [first.port, first.admin_port, second.port, second.admin_port]
        first.stop()
        second.stop()
    assert all(gone(pid) for pid in pids)
    assert all(refused(port) for port in ports)


def test_envoy_that_cannot_start_raises_with_its_log(tmp_path: Path) -> None:
    broken = f"admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {PORT}}}}}}}\n"
    broken += "static_resources: {clusters: [{name: x, type: NO_SUCH_TYPE}]}\n"
    with pytest.raises(RuntimeError, match=r"envoy on port \d+ exited .*NO_SUCH_TYPE"):
        EnvoyServer(tmp_path / "envoy", broken)


# -- nginx -------------------------------------------------------------------------------------


def test_shipped_nginx_config_passes_nginx_t(tmp_path: Path) -> None:
    result = nginx_test(tmp_path / "nginx", NGINX_CONF.read_text())
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


@pytest.mark.parametrize("fail_open", [True, False])
def test_rendered_nginx_config_changes_only_the_marked_values(
    tmp_path: Path, fail_open: bool
) -> None:
    text = nginx_config(upstream_port=1111, ratekeeper_port=2222, fail_open=fail_open)
    shipped = NGINX_CONF.read_text().splitlines()
    removed = [line for line in shipped if line not in text.splitlines()]
    added = [line for line in text.splitlines() if line not in shipped]
    assert [line.strip() for line in removed] == [
        "server 127.0.0.1:8080;  # <- SET ratekeeper (more server lines for more instances)",
        "server 127.0.0.1:9000;  # <- SET application",
        "listen 8000;  # <- SET listen",
        *([] if fail_open else [FAIL_OPEN_LINE]),
    ]
    assert [line.strip() for line in added] == [
        "server 127.0.0.1:2222;  # <- SET ratekeeper (more server lines for more instances)",
        "server 127.0.0.1:1111;  # <- SET application",
        "listen 127.0.0.1:{{port}};  # <- SET listen",
    ]
    result = nginx_test(tmp_path / "nginx", text.replace("{{port}}", str(free_port())))
    assert result.returncode == 0, result.stderr


@pytest.fixture
def nginx(tmp_path: Path, app: UpstreamServer, auth: UpstreamServer) -> Iterator[NginxServer]:
    """nginx from the shipped file as it is (fail open), in front of ``app``, asking ``auth``."""
    config = nginx_config(upstream_port=app.port, ratekeeper_port=auth.port)
    server = NginxServer(tmp_path / "nginx", config)
    yield server
    server.stop()


def test_nginx_lets_an_allowed_request_through_with_the_headers(
    nginx: NginxServer, app: UpstreamServer, auth: UpstreamServer
) -> None:
    answer = http_request(
        nginx.port, "/items?page=2", method="POST", headers={"X-User": "alice"}, body=b"hello"
    )
    assert answer.status == 200
    assert answer.headers["x-ratelimit-limit"] == "10"
    assert answer.headers["x-ratelimit-remaining"] == "9"
    assert answer.headers["x-ratelimit-reset"] == "60"
    assert "retry-after" not in answer.headers
    seen = answer.json()
    assert (seen["method"], seen["path"], seen["body"]) == ("POST", "/items?page=2", "hello")
    assert seen["headers"]["x-user"] == "alice"
    assert seen["headers"]["x-real-ip"] == "127.0.0.1"
    # The decision endpoint got one bodiless GET /v1/nginx carrying the descriptors' headers.
    [asked] = auth.requests()
    assert (asked["method"], asked["path"], asked["body"]) == ("GET", "/v1/nginx", "")
    headers = asked["headers"]
    assert headers["x-ratelimit-domain"] == "edge"
    assert headers["x-real-ip"] == "127.0.0.1"
    assert headers["x-user"] == "alice"
    assert headers["x-original-uri"] == "/items?page=2"
    assert headers["x-original-method"] == "POST"
    assert "content-length" not in headers


def test_nginx_sets_the_descriptor_headers_over_the_clients_own(
    nginx: NginxServer, auth: UpstreamServer
) -> None:
    forged = {
        "X-RateLimit-Domain": "other",
        "X-Real-IP": "192.0.2.1",
        "X-Original-URI": "/deny",
        "X-Original-Method": "DELETE",
    }
    assert http_request(nginx.port, "/items", headers=forged).status == 200
    [asked] = auth.requests()
    headers = asked["headers"]
    assert headers["x-ratelimit-domain"] == "edge"
    assert headers["x-real-ip"] == "127.0.0.1"
    assert (headers["x-original-uri"], headers["x-original-method"]) == ("/items", "GET")


def test_nginx_sends_no_user_header_when_the_client_has_none(
    nginx: NginxServer, auth: UpstreamServer
) -> None:
    assert http_request(nginx.port, "/items").status == 200
    [asked] = auth.requests()
    assert "x-user" not in asked["headers"]
    assert asked["headers"]["x-original-method"] == "GET"


def test_nginx_turns_a_403_into_429_with_retry_after(
    nginx: NginxServer, app: UpstreamServer
) -> None:
    answer = http_request(nginx.port, "/deny/items", headers={"X-User": "alice"})
    assert answer.status == 429
    assert answer.body == b"Too Many Requests\n"
    assert answer.headers["retry-after"] == "60"
    assert answer.headers["x-ratelimit-limit"] == "10"
    assert answer.headers["x-ratelimit-remaining"] == "0"
    assert answer.headers["x-ratelimit-reset"] == "60"
    assert app.requests() == []


def test_nginx_fails_open_when_the_decision_endpoint_is_down(
    tmp_path: Path, app: UpstreamServer
) -> None:
    config = nginx_config(upstream_port=app.port, ratekeeper_port=free_port())
    nginx = NginxServer(tmp_path / "nginx", config)
    try:
        body = b"x" * 300_000  # past nginx's buffer: the body goes through a temporary file
        answer = http_request(nginx.port, "/items", method="POST", body=body)
        assert answer.status == 200
        assert (answer.json()["method"], answer.json()["body"]) == ("POST", body.decode())
        assert not {"x-ratelimit-limit", "retry-after"} & set(answer.headers)
        assert len(app.requests()) == 1
    finally:
        nginx.stop()


def test_nginx_fails_open_on_any_other_status_of_the_endpoint(
    nginx: NginxServer, app: UpstreamServer
) -> None:
    answer = http_request(nginx.port, "/status/429")
    assert answer.status == 200
    assert [r["path"] for r in app.requests()] == ["/status/429"]


def test_nginx_fails_closed_with_500_without_the_fail_open_line(
    tmp_path: Path, app: UpstreamServer, auth: UpstreamServer
) -> None:
    down = nginx_config(upstream_port=app.port, ratekeeper_port=free_port(), fail_open=False)
    up = nginx_config(upstream_port=app.port, ratekeeper_port=auth.port, fail_open=False)
    first = NginxServer(tmp_path / "down", down)
    second = NginxServer(tmp_path / "up", up)
    try:
        assert http_request(first.port, "/items").status == 500
        assert http_request(second.port, "/status/429").status == 500  # 429 is not "deny"
        assert http_request(second.port, "/deny").status == 429
        assert http_request(second.port, "/items").status == 200
        assert [r["path"] for r in app.requests()] == ["/items"]
    finally:
        first.stop()
        second.stop()


def test_nginx_stops_by_pid_workers_included(tmp_path: Path, app: UpstreamServer) -> None:
    config = nginx_config(upstream_port=app.port, ratekeeper_port=free_port())
    for end in ("stop", "kill"):
        nginx = NginxServer(tmp_path / end, config)
        pid, port, status_port = nginx.pid, nginx.port, nginx.status_port
        assert nginx.url == f"http://127.0.0.1:{port}"
        getattr(nginx, end)()
        assert nginx.process is None
        assert gone(pid)
        assert running_in_group(pid) == []  # no worker is left
        assert refused(port)
        assert refused(status_port)


def test_nginx_that_cannot_start_raises_with_its_log(tmp_path: Path) -> None:
    broken = f"server {{ listen 127.0.0.1:{PORT}; location / {{ no_such_directive; }} }}\n"
    with pytest.raises(RuntimeError, match=r"nginx on port \d+ exited .*no_such_directive"):
        NginxServer(tmp_path / "nginx", broken)
