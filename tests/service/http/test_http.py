"""The decision service's HTTP API, in-process: every endpoint, every kind of bad input, exact
remaining counts under a fake clock, and parity with the engine called directly."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import AsyncEngine, Engine, MemoryStore
from ratekeeper.rules import parse_rules
from ratekeeper.service.http import MAX_BODY
from ratekeeper.service.runtime.app import create_app
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock
from tests.servers import free_port
from tests.service.asgi import AppClient, service_app

RULES = """
domain: test
descriptors:
  - key: generic_key
    value: default
    rate_limit: {unit: minute, requests_per_unit: 3, name: everyone}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
"""

TOKEN = "admin-token-0123456789abcdef"
START = 1_699_999_990.0  # 10 s into a minute
DEFAULT = {
    "domain": "test",
    "descriptors": [{"entries": [{"key": "generic_key", "value": "default"}]}],
}


@pytest.fixture
def fake() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def client(fake: FakeClock, tmp_path: Path) -> Iterator[AppClient]:
    app = service_app(RULES, tmp_path, fake, admin_token=TOKEN, ietf_headers=True)
    with AppClient(app) as client:
        yield client


def problem(response: Any, status: int, pointer: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert {"type", "title", "detail"} <= set(body)
    assert body.get("pointer") == pointer
    assert "Traceback" not in response.text
    return body


# Checks.


def test_a_key_with_a_limit_counts_down_then_refuses(client: AppClient) -> None:
    answers = [client.post("/v1/check", json={"key": "k", "limit": "2/minute"}) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert [a.json()["statuses"][0]["remaining"] for a in answers] == [1, 0, 0]
    first = answers[0]
    assert first.json() == {
        "allowed": True,
        "code": "OK",
        "degraded": False,
        "statuses": [
            {
                "code": "OK",
                "limit": 2,
                "remaining": 1,
                "reset_after": first.json()["statuses"][0]["reset_after"],
                "retry_after": 0.0,
                "current_limit": None,
            }
        ],
    }
    assert first.headers["x-ratelimit-limit"] == "2"
    assert first.headers["x-ratelimit-remaining"] == "1"
    assert "retry-after" not in first.headers
    refused = answers[2]
    assert refused.json()["code"] == "OVER_LIMIT"
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.headers["ratelimit-policy"] == '"default";q=2;w=60'


def test_a_limit_given_as_an_override_object_and_a_cost(client: AppClient) -> None:
    body = {"key": "k", "limit": {"capacity": 10, "time_window_sec": 60}, "cost": 4}
    assert [
        client.post("/v1/check", json=body).json()["statuses"][0]["remaining"] for _ in range(3)
    ] == [6, 2, 2]


def test_a_key_alone_follows_its_override(client: AppClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    unlimited = client.post("/v1/check", json={"key": "user:1"})
    assert unlimited.status_code == 200
    assert unlimited.json()["statuses"][0]["limit"] is None
    assert "x-ratelimit-limit" not in unlimited.headers
    stored = client.put(
        "/v1/overrides/user:1", json={"capacity": 2, "time_window_sec": 60}, headers=auth
    )
    assert stored.status_code == 200
    codes = [client.post("/v1/check", json={"key": "user:1"}).status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_descriptors_through_the_rules(client: AppClient, fake: FakeClock) -> None:
    answers = [client.post("/v1/check", json=DEFAULT) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].json()["statuses"] == [
        {
            "code": "OK",
            "limit": 3,
            "remaining": 2,
            "reset_after": 50.0,
            "retry_after": 0.0,
            "current_limit": {"requests_per_unit": 3, "unit": "MINUTE", "name": "everyone"},
        }
    ]
    assert answers[3].headers["retry-after"] == "50"
    assert answers[3].headers["x-ratelimit-reset"] == "50"
    assert answers[3].headers["ratelimit"] == '"everyone";r=0;t=50'
    fake.advance(50)
    assert client.post("/v1/check", json=DEFAULT).status_code == 200


def test_an_always_refusing_rule_waits_a_day(client: AppClient) -> None:
    body = {"domain": "test", "descriptors": [{"entries": [{"key": "blocked", "value": "x"}]}]}
    answer = client.post("/v1/check", json=body)
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "86400"
    assert answer.json()["statuses"][0]["retry_after"] is None


def test_a_limit_sent_with_a_descriptor_and_hits_addend(client: AppClient) -> None:
    body = {
        "domain": "test",
        "descriptors": [
            {
                "entries": [{"key": "any", "value": "x"}],
                "limit": {"requests_per_unit": 5, "unit": "SECOND"},
            }
        ],
        "hits_addend": 2,
    }
    remaining = [
        client.post("/v1/check", json=body).json()["statuses"][0]["remaining"] for _ in range(3)
    ]
    assert remaining == [3, 1, 1]


def test_batch_peek_and_reset(client: AppClient) -> None:
    batch = client.post(
        "/v1/check/batch",
        json=[{"key": "a", "limit": "1/minute"}, DEFAULT, {"key": "a", "limit": "1/minute"}],
    )
    assert batch.status_code == 200
    body = batch.json()
    assert body["allowed"] is False
    assert [r["code"] for r in body["results"]] == ["OK", "OK", "OVER_LIMIT"]
    peek = client.post("/v1/peek", json=DEFAULT)
    assert peek.status_code == 200
    assert peek.json()["statuses"][0]["remaining"] == 2
    assert client.post("/v1/peek", json=DEFAULT).json()["statuses"][0]["remaining"] == 2
    assert (
        client.post("/v1/peek", json={"key": "a", "limit": "1/minute"}).json()["statuses"][0][
            "remaining"
        ]
        == 0
    )
    reset = {"key": "a", "limit": "1/minute"}
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}):
        refused = client.post("/v1/reset", json=reset, headers=headers)
        assert (
            refused.status_code == 401 and "bearer" in refused.headers["www-authenticate"].lower()
        )
    assert client.post("/v1/check", json=reset).status_code == 429  # nothing was forgotten
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert client.post("/v1/reset", json=reset, headers=auth).status_code == 204
    assert client.post("/v1/check", json=reset).status_code == 200


def test_a_bad_item_in_a_batch_counts_nothing(client: AppClient) -> None:
    answer = client.post("/v1/check/batch", json=[{"key": "b", "limit": "1/minute"}, {"key": ""}])
    problem(answer, 422, "/1/key")
    assert client.post("/v1/check", json={"key": "b", "limit": "1/minute"}).status_code == 200


# Bad input.


@pytest.mark.parametrize(
    ("body", "status", "pointer"),
    [
        (b"{", 400, None),
        (b"NaN", 400, None),
        (b"[1]", 422, None),
        (b'"key"', 422, None),
        (json.dumps({"key": ""}).encode(), 422, "/key"),
        (json.dumps({"key": 5}).encode(), 422, "/key"),
        (json.dumps({"key": "k", "cost": -1}).encode(), 422, "/cost"),
        (json.dumps({"key": "k", "cost": 1.5}).encode(), 422, "/cost"),
        (json.dumps({"key": "k", "cost": True}).encode(), 422, "/cost"),
        (json.dumps({"key": "k", "cost": 2**60}).encode(), 422, "/cost"),
        (json.dumps({"key": "k", "limit": "ten per fortnight"}).encode(), 422, "/limit"),
        (json.dumps({"key": "k", "limit": "1/second; 5/minute"}).encode(), 422, "/limit"),
        (json.dumps({"key": "k", "limit": {"capacity": 1}}).encode(), 422, "/limit"),
        (json.dumps({"key": "k", "limit": 5}).encode(), 422, "/limit"),
        (json.dumps({"key": "k", "extra": 1}).encode(), 422, "/extra"),
        (json.dumps({"cost": 1}).encode(), 422, None),
        (json.dumps({"domain": "", "descriptors": []}).encode(), 422, "/domain"),
        (json.dumps({"domain": "test", "descriptors": []}).encode(), 422, "/descriptors"),
        (
            json.dumps({"domain": "test", "descriptors": [{"entries": []}]}).encode(),
            422,
            "/descriptors/0/entries",
        ),
        (
            json.dumps(
                {"domain": "test", "descriptors": [{"entries": [{"key": "", "value": "v"}]}]}
            ).encode(),
            422,
            "/descriptors/0/entries/0/key",
        ),
        (
            json.dumps(
                {
                    "domain": "test",
                    "descriptors": [
                        {
                            "entries": [{"key": "k"}],
                            "limit": {"requests_per_unit": 1, "unit": "FORTNIGHT"},
                        }
                    ],
                }
            ).encode(),
            422,
            "/descriptors/0",
        ),
        (json.dumps({**DEFAULT, "hits_addend": -1}).encode(), 422, "/hits_addend"),
    ],
)
def test_bad_input_is_a_problem(
    client: AppClient, body: bytes, status: int, pointer: str | None
) -> None:
    answer = client.post("/v1/check", content=body, headers={"content-type": "application/json"})
    detail = problem(answer, status, pointer)["detail"]
    assert detail


def test_an_unknown_unit_is_named(client: AppClient) -> None:
    body = {
        "domain": "test",
        "descriptors": [
            {"entries": [{"key": "k"}], "limit": {"requests_per_unit": 1, "unit": "FORTNIGHT"}}
        ],
    }
    assert (
        "'FORTNIGHT'"
        in problem(client.post("/v1/check", json=body), 422, "/descriptors/0")["detail"]
    )


def test_a_body_over_the_limit_is_413(client: AppClient) -> None:
    big = json.dumps({"key": "k" * (MAX_BODY + 1)}).encode()
    problem(client.post("/v1/check", content=big), 413)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(MAX_BODY // 1024 + 2):
            yield b" " * 1024

    problem(client.post("/v1/check", content=chunks()), 413)


def test_unknown_routes_and_methods_are_problems(client: AppClient) -> None:
    problem(client.get("/v2/nothing"), 404)
    problem(client.get("/v1/check"), 405)


# Admin.


def test_overrides_need_the_token(client: AppClient) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        answer = client.get("/v1/overrides/user:1", headers=headers)
        problem(answer, 401, "/headers/authorization")
        assert answer.headers["www-authenticate"].startswith("Bearer")


def test_override_crud(client: AppClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    problem(client.get("/v1/overrides/user:1", headers=auth), 404)
    put = client.put(
        "/v1/overrides/user:1?domain=api", json={"capacity": 5, "time_window_sec": 1}, headers=auth
    )
    assert put.json() == {
        "domain": "api",
        "key": "user:1",
        "override": {"capacity": 5, "time_window_sec": 1, "algorithm": "fixed_window"},
    }
    client.put("/v1/overrides/user:2", json={"capacity": 7, "time_window_sec": 60}, headers=auth)
    assert (
        client.get("/v1/overrides/user:1?domain=api", headers=auth).json()["override"]["capacity"]
        == 5
    )
    problem(client.get("/v1/overrides/user:1", headers=auth), 404)  # another domain
    listing = client.get("/v1/overrides?prefix=user:", headers=auth).json()
    assert [(o["domain"], o["key"]) for o in listing["overrides"]] == [
        ("", "user:2"),
        ("api", "user:1"),
    ]
    assert listing["truncated"] is False
    assert len(client.get("/v1/overrides?domain=api", headers=auth).json()["overrides"]) == 1
    bad = client.put("/v1/overrides/user:3", json={"capacity": 5}, headers=auth)
    assert "time_window_sec" in problem(bad, 422)["detail"]
    problem(client.put("/v1/overrides/user:3", content=b"{", headers=auth), 400)
    assert client.delete("/v1/overrides/user:1?domain=api", headers=auth).status_code == 204
    problem(client.delete("/v1/overrides/user:1?domain=api", headers=auth), 404)


def test_with_no_token_the_admin_routes_are_off(fake: FakeClock) -> None:
    app = create_app(AsyncEngine(AsyncMemoryStore(clock=fake), clock=fake))
    with AppClient(app) as client:
        for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Bearer None"}):
            problem(client.get("/v1/overrides/k", headers=headers), 404)
            problem(
                client.put(
                    "/v1/overrides/k", json={"capacity": 1, "time_window_sec": 1}, headers=headers
                ),
                404,
            )
            problem(client.get("/v1/overrides", headers=headers), 404)


# Health, Envoy's HTTP side, the document.


@pytest.mark.parametrize("limit", ["²/minute", "\u0661\u0660/minute", "10/\u0665m"])
def test_a_rate_with_digits_other_than_0_to_9_is_422(client: AppClient, limit: str) -> None:
    problem(client.post("/v1/check", json={"key": "k", "limit": limit}), 422, "/limit")


def test_health_and_readiness(client: AppClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "store": {
            "ok": True,
            "breaker": "closed",
            "error": None,
            "open_shards": [],
            "last_error": None,
            "instances": {"size": 1, "source": "configured"},
            "warnings": [],
        },
        "config": {"ok": True, "error": None},
    }
    assert client.get("/healthcheck").text == "OK"


def test_readiness_reports_a_configuration_store_that_fails(
    fake: FakeClock, tmp_path: Path
) -> None:
    app = service_app(RULES, tmp_path, fake)
    with AppClient(app) as client:
        assert client.get("/readyz").json()["config"] == {"ok": True, "error": None}
        with sqlite3.connect(tmp_path / "config.db") as db:  # the table gone from under it
            db.execute("DROP TABLE overrides")
        ready = client.get("/readyz")
        # Still ready: the engine goes on deciding by the rules, as the check shows.
        assert ready.status_code == 200
        body = ready.json()
        assert body["status"] == "degraded"
        assert body["store"]["ok"] is True
        assert body["config"]["ok"] is False
        assert "no such table: overrides" in body["config"]["error"]
        assert client.post("/json", json=DEFAULT).status_code == 200


def test_readiness_reports_a_configuration_store_that_is_down(fake: FakeClock) -> None:
    engine = AsyncEngine(
        AsyncMemoryStore(clock=fake),
        config=f"postgresql://ratekeeper@127.0.0.1:{free_port()}/ratekeeper?connect_timeout=1",
        clock=fake,
    )
    with AppClient(create_app(engine, close_engine=True)) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200
        body = ready.json()
        assert body["status"] == "degraded"
        assert body["config"]["ok"] is False
        assert "PostgreSQL configuration store 127.0.0.1" in body["config"]["error"]


def test_readiness_fails_with_the_store(fake: FakeClock) -> None:
    engine = AsyncEngine("redis://127.0.0.1:1/0?socket_connect_timeout=0.2", clock=fake)
    with AppClient(create_app(engine, close_engine=True)) as client:
        assert client.get("/readyz").status_code == 503


def test_envoys_json_endpoint(client: AppClient) -> None:
    body = {
        "domain": "test",
        "descriptors": [{"entries": [{"key": "generic_key", "value": "default"}]}],
    }
    answers = [client.post("/json", json=body) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].json() == {
        "overallCode": "OK",
        "statuses": [
            {
                "code": "OK",
                "currentLimit": {"requestsPerUnit": 3, "unit": "MINUTE", "name": "everyone"},
                "limitRemaining": 2,
                "durationUntilReset": "50s",
            }
        ],
    }
    assert answers[3].json()["statuses"][0] == {
        "code": "OVER_LIMIT",
        "currentLimit": {"requestsPerUnit": 3, "unit": "MINUTE", "name": "everyone"},
        "durationUntilReset": "50s",
    }
    camel = {
        "domain": "test",
        "descriptors": [
            {
                "entries": [{"key": "any"}],
                "limit": {"requestsPerUnit": 9, "unit": 1},
                "hitsAddend": "2",
            }
        ],
    }
    assert client.post("/json", json=camel).json()["statuses"][0]["limitRemaining"] == 7
    zero = {"domain": "test", "descriptors": [{"entries": [{"key": "any"}], "limit": {"unit": 1}}]}
    refused = client.post("/json", json=zero)  # requestsPerUnit left out, as protobuf's JSON does
    assert (refused.status_code, refused.json()["overallCode"]) == (429, "OVER_LIMIT")
    for bad in (
        b"{",
        b'{"domain": ""}',
        b'{"domain": "test", "descriptors": []}',
        b'{"domian": "x"}',
        b"[" * 30_000 + b"]" * 30_000,  # nested deeper than Python's JSON parser goes
    ):
        answer = client.post("/json", content=bad)
        assert (answer.status_code, answer.text) == (400, "Bad Request\n")


QUOTA_RULES = """
domain: test
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {service_with_quota: {name: service_1}}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {service_with_quota: {name: service_2}, zone: east}
"""


def test_envoys_json_endpoint_answers_dynamic_metadata_when_asked(
    fake: FakeClock, tmp_path: Path
) -> None:
    """``dynamicMetadata``, as the reference's ``/json`` answers it (protobuf's JSON of the
    response's ``dynamic_metadata``): the first passing descriptor's rule metadata wins."""
    both = {
        "domain": "test",
        "hitsAddend": 1,
        "descriptors": [
            {"entries": [{"key": "service", "value": "service_1"}]},
            {
                "entries": [{"key": "service", "value": "service_2"}],
                "limit": {"requestsPerUnit": 2, "unit": "MINUTE"},
                "hits_addend": 0,
            },
        ],
    }
    app = service_app(QUOTA_RULES, tmp_path, fake, dynamic_metadata=True)
    with AppClient(app) as client:
        answers = [client.post("/json", json=both) for _ in range(2)]
    descriptors = [
        {"entries": ["service=service_1"]},
        {
            "entries": ["service=service_2"],
            "limit": "requests_per_unit:2 unit:MINUTE",
            "hitsAddend": 0,
        },
    ]
    # service_1, the one descriptor in quota mode (a sent limit never is), is over at once
    assert [a.status_code for a in answers] == [200, 429]
    assert [a.json()["dynamicMetadata"] for a in answers] == [
        {
            "domain": "test",
            "descriptors": descriptors,
            "hitsAddend": 1,
            "metadata": {"service_with_quota": {"name": "service_1"}},
        },
        # service_1 over its limit; service_2's limit is the one sent, without its metadata
        {"domain": "test", "descriptors": descriptors, "hitsAddend": 1},
    ]
    with AppClient(service_app(QUOTA_RULES, tmp_path, fake)) as client:
        assert "dynamicMetadata" not in client.post("/json", json=both).json()


def test_the_openapi_document_covers_every_route(client: AppClient) -> None:
    document = client.get("/openapi.json").json()
    assert document["openapi"].startswith("3.")
    routes = {
        route.path.replace("{key:path}", "{key}")  # type: ignore[attr-defined]
        for route in client.app.routes  # type: ignore[attr-defined]
    }
    dashboard = {
        path for path in document["paths"] if path.startswith(("/dashboard", "/v1/s", "/v1/top"))
    }
    assert (
        dashboard
        == {  # served with --dashboard only (tests/service/dashboard/test_dashboard.py)
            "/dashboard",
            "/dashboard/login",
            "/dashboard/logout",
            "/dashboard/assets/{name}",
            "/v1/stats",
            "/v1/top",
        }
    )
    assert set(document["paths"]) - dashboard == routes
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            if method != "parameters":
                assert operation["responses"], (path, method)


# Parity.


def test_the_api_decides_as_the_engine(fake: FakeClock) -> None:
    other = FakeClock(START)
    engine = Engine(MemoryStore(clock=other), rules=parse_rules(RULES, "rules.yaml"), clock=other)
    served = AsyncEngine(
        AsyncMemoryStore(clock=fake), rules=parse_rules(RULES, "rules.yaml"), clock=fake
    )
    steps = [0.0, 0.0, 1.5, 0.0, 0.0, 20.0, 0.0, 39.0, 0.0, 0.0]
    with AppClient(create_app(served)) as client:
        for step in steps:
            fake.advance(step)
            other.advance(step)
            direct = engine.check("test", [[("generic_key", "default")]]).statuses[0]
            answer = client.post("/v1/check", json=DEFAULT)
            status = answer.json()["statuses"][0]
            assert answer.status_code == (200 if direct.allowed else 429)
            assert direct.decision is not None
            assert status["remaining"] == direct.decision.remaining
            assert status["reset_after"] == direct.decision.reset_after


def test_durations_as_protobufs_json_writes_them() -> None:
    from ratekeeper.service.http.envoy_json import duration

    assert [duration(s) for s in (60.0, 1.5, 0.25, 0.000001, 0.0)] == [
        "60s",
        "1.500s",
        "0.250s",
        "0.000001s",
        "0s",
    ]


@pytest.mark.parametrize(("policy", "status"), [("allow", 200), ("deny", 429)])
def test_a_store_failure_is_answered_by_the_policy(policy: str, status: int) -> None:
    from ratekeeper.stores import open_async_store

    store = open_async_store(
        f"redis://127.0.0.1:{free_port()}/0", on_store_error=policy, timeout=0.2
    )
    with AppClient(create_app(AsyncEngine(store), close_engine=True)) as client:
        answer = client.post("/v1/check", json={"key": "k", "limit": "5/minute"})
        assert answer.status_code == status
        assert answer.headers["x-ratelimit-degraded"] == "true"
        assert answer.json()["degraded"] is True
        assert client.get("/readyz").status_code == 503


def test_a_store_failure_without_a_policy_is_503() -> None:
    from ratekeeper.stores import open_async_store

    store = open_async_store(f"redis://127.0.0.1:{free_port()}/0", on_store_error=None, timeout=0.2)
    with AppClient(create_app(AsyncEngine(store), close_engine=True)) as client:
        problem(client.post("/v1/check", json={"key": "k", "limit": "5/minute"}), 503)


def test_a_key_decides_as_the_engine_hit(fake: FakeClock) -> None:
    other = FakeClock(START)
    engine = Engine(MemoryStore(clock=other), clock=other)
    served = AsyncEngine(AsyncMemoryStore(clock=fake), clock=fake)
    limits = ["3/second", "3/second", "10/minute", "3/second", "3/second", "3/second"]
    steps = [0.0, 0.2, 0.0, 0.3, 0.0, 0.9]
    with AppClient(create_app(served)) as client:
        for step, limit in zip(steps, limits, strict=True):
            fake.advance(step)
            other.advance(step)
            for cost in (1, 2):
                direct = engine.hit("k", limit, cost)
                answer = client.post("/v1/check", json={"key": "k", "limit": limit, "cost": cost})
                status = answer.json()["statuses"][0]
                assert answer.status_code == (200 if direct.allowed else 429)
                assert (status["remaining"], status["reset_after"]) == (
                    direct.remaining,
                    direct.reset_after,
                )
