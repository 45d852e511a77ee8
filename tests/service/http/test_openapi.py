"""The OpenAPI document and the app agree on each body: what the document calls valid the app
decides, and what it calls invalid the app refuses with a 4xx problem (Envoy's ``POST /json``
with its plain 400). Each case is one the fuzzer (``test_fuzz.py``) found them disagreeing on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from ratekeeper.service.http.openapi import document
from ratekeeper.testing import FakeClock
from tests.service.asgi import AppClient, service_app

RULES = """
domain: test
descriptors:
  - key: generic_key
    rate_limit: {unit: minute, requests_per_unit: 3}
"""
TOKEN = "openapi-admin-token-0123456789"
ONE = [{"entries": [{"key": "generic_key", "value": "v"}]}]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[AppClient]:
    app = service_app(RULES, tmp_path, FakeClock(1_700_000_000.0), admin_token=TOKEN)
    with AppClient(app) as client:
        yield client


def valid(path: str, method: str, body: Any) -> bool:
    """Whether the document's schema of the request body of ``method path`` allows ``body``."""
    doc = document()
    schema = doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.Draft202012Validator({**schema, "components": doc["components"]})
    return validator.is_valid(body)


CASES = [
    # null stands for a limit not given, as leaving it out does.
    ("/v1/check", {"key": "k", "limit": None}, True),
    ("/v1/reset", {"key": "k", "limit": None}, True),
    ("/v1/check", {"domain": "test", "descriptors": [{**ONE[0], "limit": None}]}, True),
    ("/v1/check", {"domain": "test", "descriptors": [{**ONE[0], "hits_addend": None}]}, True),
    # A peek checks its cost as a check does, though it counts nothing.
    ("/v1/peek", {"key": "k", "limit": "5/minute", "cost": 2**77}, False),
    ("/v1/peek", {"key": "k", "limit": "5/minute", "cost": -1}, False),
    ("/v1/peek", {"key": "k", "limit": "5/minute", "cost": "1"}, False),
    ("/v1/check", {"key": "k", "limit": "5/minute", "cost": 2**53}, False),
    # A reset names a non-empty key, and nothing else but its limit.
    ("/v1/reset", {"key": ""}, False),
    ("/v1/reset", {"key": "k", "cost": 1}, False),
    # An override's capacity is at least 1, its algorithm one ratekeeper has.
    ("/v1/check", {"key": "k", "limit": {"capacity": 0, "time_window_sec": 1}}, False),
    ("/v1/check", {"key": "k", "limit": {"capacity": 1, "time_window_sec": 1}}, True),
    (
        "/v1/check",
        {"key": "k", "limit": {"capacity": 1, "time_window_sec": 1, "algorithm": "magic"}},
        False,
    ),
    ("/v1/check", {"key": "k", "limit": {"capacity": 1, "time_window_sec": 0}}, False),
    # An entry holds a key and a value only; a limit sent with a descriptor counts from 1.
    (
        "/v1/check",
        {"domain": "test", "descriptors": [{"entries": [{"key": "a", "extra": "x"}]}]},
        False,
    ),
    (
        "/v1/check",
        {
            "domain": "test",
            "descriptors": [{**ONE[0], "limit": {"requests_per_unit": 0, "unit": "SECOND"}}],
        },
        True,  # always over, as in Envoy's service
    ),
    (
        "/v1/check",
        {
            "domain": "test",
            "descriptors": [{**ONE[0], "limit": {"requests_per_unit": 2, "unit": "second"}}],
        },
        True,
    ),
    # A batch holds 1 to 1000 checks.
    ("/v1/check/batch", [], False),
    ("/v1/check/batch", [{"key": "k", "limit": "5/minute"}], True),
    # Envoy's request, in protobuf's JSON.
    ("/json", {}, False),
    ("/json", {"domain": "test", "descriptors": ONE}, True),
    ("/json", {"domain": "test", "descriptors": ONE, "hitsAddend": "2"}, True),
    ("/json", {"domain": "test", "descriptors": ONE, "hitsAddend": None}, True),
    ("/json", {"domain": "test", "descriptors": ONE, "hits_addend": 1, "hitsAddend": 1}, False),
    ("/json", {"domain": "test", "descriptors": ONE, "hitsAddend": ""}, False),
    ("/json", {"domain": "test", "descriptors": ONE, "hitsAddend": "\u0663"}, False),
    ("/json", {"domain": "test", "descriptors": [{"entries": False}]}, False),
    ("/json", {"domain": "test", "descriptors": [{"entries": []}]}, True),
    (
        "/json",
        {
            "domain": "test",
            "descriptors": [{**ONE[0], "limit": {"requestsPerUnit": 5, "unit": 2.0}}],
            "hitsAddend": 1.0,
        },
        True,
    ),
    (
        "/json",
        {
            "domain": "test",
            "descriptors": [{**ONE[0], "limit": {"requestsPerUnit": 5, "unit": 2.5}}],
        },
        False,
    ),
    # protobuf's JSON leaves a zero out: a limit without requestsPerUnit is 0, always over.
    ("/json", {"domain": "test", "descriptors": [{**ONE[0], "limit": {"unit": "SECOND"}}]}, True),
    ("/json", {"domain": "test", "descriptors": [{**ONE[0], "limit": {}}]}, False),
]


@pytest.mark.parametrize(("path", "body", "allowed"), CASES)
def test_the_document_and_the_app_agree(
    client: AppClient, path: str, body: Any, allowed: bool
) -> None:
    assert valid(path, "post", body) is allowed
    auth = {"Authorization": f"Bearer {TOKEN}"}  # /v1/reset is an admin endpoint
    answer = client.post(path, content=json.dumps(body).encode(), headers=auth)
    if allowed:
        assert answer.status_code in (200, 204, 429), answer.text
    elif path == "/json":
        assert (answer.status_code, answer.text) == (400, "Bad Request\n")
    else:
        assert answer.status_code == 422, answer.text
        assert answer.headers["content-type"] == "application/problem+json"


def test_an_override_the_document_allows_is_stored(client: AppClient) -> None:
    body = {"capacity": 5, "time_window_sec": "1m", "algorithm": "gcra", "burst": 2}
    assert valid("/v1/overrides/{key}", "put", body)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert client.put("/v1/overrides/k", json=body, headers=auth).status_code == 200


def test_every_status_the_admin_routes_answer_is_documented(client: AppClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    operations = document()["paths"]["/v1/overrides/{key}"]
    for method in ("get", "delete"):
        answer = client.request(method.upper(), "/v1/overrides/k?domain=%00", headers=auth)
        assert answer.status_code == 422, answer.text
        assert "422" in operations[method]["responses"]
    assert "422" in document()["paths"]["/v1/overrides"]["get"]["responses"]


def test_nginx_headers_are_documented() -> None:
    parameters = document()["paths"]["/v1/nginx"]["get"]["parameters"]
    required = {one["name"] for one in parameters if one["required"]}
    assert required == {"X-Real-IP"}
    assert {one["in"] for one in parameters} == {"header"}
