"""Bad input to the HTTP API, one kind at a time: each is a 4xx ``application/problem+json``
that says what is wrong and where (a JSON Pointer into the body, or the header at fault), and
counts nothing. The cases ``test_http.py`` already holds are not repeated here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import AsyncEngine
from ratekeeper.config import open_config_store
from ratekeeper.core.inputs import MAX_COST
from ratekeeper.service.http import MAX_BODY
from ratekeeper.service.runtime.app import create_app
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock
from tests.service.asgi import AppClient, service_app

RULES = """
domain: test
descriptors:
  - key: generic_key
    rate_limit: {unit: minute, requests_per_unit: 3}
"""
TOKEN = "input-admin-token-0123456789"
LIMIT = "2/minute"
ONE = [{"entries": [{"key": "k"}]}]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[AppClient]:
    app = service_app(RULES, tmp_path, FakeClock(1_700_000_000.0), admin_token=TOKEN)
    with AppClient(app) as client:
        yield client


def problem(answer: Any, status: int, pointer: str | None, *words: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    assert (body["status"], body.get("pointer")) == (status, pointer)
    assert body["type"].startswith("urn:ratekeeper:problem:")
    for word in words:
        assert word in body["detail"], body["detail"]
    assert "Traceback" not in answer.text
    return body


def untouched(client: AppClient) -> None:
    """The key the bad requests named still has its whole limit."""
    answer = client.post("/v1/peek", json={"key": "k", "limit": LIMIT})
    assert answer.json()["statuses"][0]["remaining"] == 2


JSON = {"content-type": "application/json"}


def post(client: AppClient, path: str, raw: bytes) -> Any:
    """``raw`` posted as JSON, with the admin token (which ``/v1/reset`` needs)."""
    return client.post(path, content=raw, headers={**JSON, "authorization": f"Bearer {TOKEN}"})


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"key": "k", "limit": "2/minute"', ("not valid JSON", "char 32")),
        (b'{"key": "k", "cost": NaN}', ("NaN is not a JSON number",)),
        (b'{"key": "k", "cost": Infinity}', ("Infinity is not a JSON number",)),
        (b'{"key": "k", "cost": -Infinity}', ("-Infinity is not a JSON number",)),
        (b"\xff\xfe{}", ("not valid JSON",)),
        (b"", ("not valid JSON",)),
        (b"[" * 50_000, ("not valid JSON",)),
    ],
)
@pytest.mark.parametrize("path", ["/v1/check", "/v1/peek", "/v1/check/batch", "/v1/reset"])
def test_a_body_that_is_not_json_is_400(
    client: AppClient, path: str, raw: bytes, words: tuple[str, ...]
) -> None:
    problem(post(client, path, raw), 400, None, *words)
    untouched(client)


@pytest.mark.parametrize(
    ("cost", "words"),
    [
        ("1", ("cost must be an integer", "'1'")),
        (True, ("cost must be an integer", "True")),
        (False, ("False",)),
        (None, ("None",)),
        (1.0, ("1.0",)),
        (0.5, ("0.5",)),
        (-1, ("-1",)),
        (MAX_COST + 1, (str(MAX_COST + 1),)),
        (2**64, (str(2**64),)),
        (10**400, ("cost must be an integer",)),
        ([1], ("[1]",)),
        ({"n": 1}, ("cost",)),
    ],
)
@pytest.mark.parametrize("path", ["/v1/check", "/v1/peek"])
def test_a_cost_that_is_not_a_count_is_422_at_cost(
    client: AppClient, path: str, cost: Any, words: tuple[str, ...]
) -> None:
    body = {"key": "k", "limit": LIMIT, "cost": cost}
    problem(client.post(path, json=body), 422, "/cost", *words)
    problem(client.post("/v1/check/batch", json=[body]), 422, "/0/cost", *words)
    untouched(client)


def test_the_largest_cost_is_taken(client: AppClient) -> None:
    body = {"key": "big", "limit": LIMIT, "cost": MAX_COST}
    answer = client.post("/v1/check", json=body)
    assert answer.status_code == 429  # valid, and over any limit
    assert answer.json()["statuses"][0]["retry_after"] is None


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"key": ""}, "/key"),
        ({"key": None}, "/key"),
        ({"key": ["k"]}, "/key"),
        ({"domain": "", "descriptors": ONE}, "/domain"),
        ({"domain": "test", "descriptors": [{"entries": [{"key": ""}]}]},
         "/descriptors/0/entries/0/key"),
        ({"domain": "test", "descriptors": [{"entries": [{"key": "k", "value": 5}]}]},
         "/descriptors/0/entries/0/value"),
        ({"domain": "test", "descriptors": [{**ONE[0], "hits_addend": 1.5}]},
         "/descriptors/0/hits_addend"),
        ({"domain": "test", "descriptors": ONE, "hits_addend": "2"}, "/hits_addend"),
    ],
)  # fmt: skip
def test_an_empty_or_bad_key_is_422_where_it_is(
    client: AppClient, body: dict[str, Any], pointer: str
) -> None:
    problem(client.post("/v1/check", json=body), 422, pointer)


def test_a_key_that_is_no_utf_8_is_422(client: AppClient) -> None:
    answer = post(client, "/v1/check", b'{"key": "\\ud800", "limit": "2/minute"}')
    problem(answer, 422, "/key", "UTF-8")


def test_a_reset_of_an_empty_key_is_422(client: AppClient) -> None:
    auth = {"authorization": f"Bearer {TOKEN}"}
    problem(client.post("/v1/reset", json={"key": ""}, headers=auth), 422, "/key")
    answer = client.post("/v1/reset", json={"key": "k", "cost": 1}, headers=auth)
    problem(answer, 422, "/cost", "unknown")


def test_an_unknown_domain_has_no_limit_as_in_envoys_service(client: AppClient) -> None:
    body = {"domain": "elsewhere", "descriptors": [{"entries": [{"key": "generic_key"}]}]}
    for _ in range(5):
        answer = client.post("/v1/check", json=body)
        assert answer.status_code == 200
        assert answer.json()["statuses"][0]["limit"] is None
    assert "x-ratelimit-limit" not in answer.headers


def test_a_body_over_the_limit_is_413_on_every_route(client: AppClient) -> None:
    big = json.dumps({"key": "k" * MAX_BODY, "limit": LIMIT}).encode()
    auth = {"authorization": f"Bearer {TOKEN}"}
    for path in ("/v1/check", "/v1/peek", "/v1/check/batch", "/v1/reset"):
        answer = client.post(path, content=big, headers={**JSON, **auth})
        problem(answer, 413, None, str(MAX_BODY))
    problem(client.put("/v1/overrides/k", content=big, headers=auth), 413, None)
    # A Content-Length that lies small is caught as the body arrives.
    lying = {"content-length": "10", "content-type": "application/json"}
    assert client.post("/v1/check", content=big, headers=lying).status_code in (400, 413)
    untouched(client)


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_a_body_said_to_be_other_than_json_is_415(client: AppClient, content_type: str) -> None:
    raw = json.dumps({"key": "k", "limit": LIMIT}).encode()
    for path in ("/v1/check", "/v1/peek", "/v1/check/batch", "/v1/reset"):
        headers = {"content-type": content_type, "authorization": f"Bearer {TOKEN}"}
        answer = client.post(path, content=raw, headers=headers)
        problem(answer, 415, "/headers/content-type", "application/json", content_type)
    untouched(client)


@pytest.mark.parametrize(
    "content_type",
    [None, "application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
     "application/problem+json"],
)  # fmt: skip
def test_a_json_body_is_taken_with_or_without_its_content_type(
    client: AppClient, content_type: str | None
) -> None:
    raw = json.dumps({"key": "k", "limit": LIMIT}).encode()
    headers = {} if content_type is None else {"content-type": content_type}
    assert client.post("/v1/check", content=raw, headers=headers).status_code == 200


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        f"Basic {TOKEN}",
        f"Token {TOKEN}",
        TOKEN,
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        f"Bearer {TOKEN.upper()}",
        "Bearer \u00e9\u00e9\u00e9".encode("latin-1"),
    ],
)
def test_a_missing_or_wrong_bearer_token_is_401(
    client: AppClient, authorization: str | bytes | None
) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    requests = [
        ("GET", "/v1/overrides", {}),
        ("GET", "/v1/overrides/k", {}),
        ("DELETE", "/v1/overrides/k", {}),
        ("PUT", "/v1/overrides/k", {"json": {"capacity": 1, "time_window_sec": 1}}),
    ]
    for method, path, options in requests:
        answer = client.request(method, path, headers=headers, **options)
        problem(answer, 401, "/headers/authorization", "bearer token")
        assert answer.headers["www-authenticate"] == 'Bearer realm="ratekeeper"'
    auth = {"authorization": f"Bearer {TOKEN}"}
    assert client.get("/v1/overrides/k", headers=auth).status_code == 404  # nothing was stored


def test_the_scheme_is_any_case_as_http_says(client: AppClient) -> None:
    for scheme in ("bearer", "BEARER", "Bearer"):
        answer = client.get("/v1/overrides", headers={"authorization": f"{scheme} {TOKEN}"})
        assert answer.status_code == 200


def test_with_no_token_configured_no_token_opens_the_admin_routes(tmp_path: Path) -> None:
    engine = AsyncEngine(
        AsyncMemoryStore(), config=open_config_store(f"sqlite:///{tmp_path}/config.db")
    )
    with AppClient(create_app(engine, close_engine=True)) as client:
        for authorization in (None, "Bearer ", "Bearer null", f"Bearer {TOKEN}", "Basic Og=="):
            headers = {} if authorization is None else {"authorization": authorization}
            for method in ("GET", "PUT", "DELETE"):
                answer = client.request(
                    method, "/v1/overrides/k", headers=headers, json={"capacity": 1}
                )
                problem(answer, 404, None, "admin endpoints are off")
            problem(client.get("/v1/overrides", headers=headers), 404, None, "off")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/check"),
        ("PUT", "/v1/check"),
        ("DELETE", "/v1/check/batch"),
        ("GET", "/v1/reset"),
        ("POST", "/healthz"),
        ("POST", "/v1/overrides"),
        ("PATCH", "/v1/overrides/k"),
        ("POST", "/openapi.json"),
    ],
)
def test_a_wrong_method_is_405_naming_the_allowed_ones(
    client: AppClient, method: str, path: str
) -> None:
    answer = client.request(method, path)
    problem(answer, 405, None)
    assert answer.headers["allow"]
    assert method not in answer.headers["allow"].split(", ")


@pytest.mark.parametrize("path", ["/", "/v1", "/v1/checks", "/v2/check", "/%00"])
def test_an_unknown_path_is_404(client: AppClient, path: str) -> None:
    problem(client.post(path, json={"key": "k"}), 404, None)
