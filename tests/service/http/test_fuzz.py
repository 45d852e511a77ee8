"""The HTTP API fuzzed from its own OpenAPI document (schemathesis): every operation, with
valid and invalid input, the admin routes and the dashboard with the bearer token, without it,
and switched off.
No answer is a 5xx, and every answer is one the document describes: its status, content type,
headers and body; invalid input is refused, valid input is not refused as malformed.

In-process through ASGI, bounded and derandomized so that a run is quick and the same on every
machine; then a smaller run against a real ``ratekeeper serve`` over loopback, from the document
it serves.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.internal.conjecture import providers
from schemathesis import GenerationMode

from ratekeeper.service.http.openapi import document
from ratekeeper.testing import FakeClock
from tests.service.asgi import service_app
from tests.service.served import Served

RULES = """
domain: test
descriptors:
  - key: generic_key
    rate_limit: {unit: minute, requests_per_unit: 3, name: everyone}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
"""
TOKEN = "fuzz-admin-token-0123456789"

FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
CHECKS: dict[str, Any] = {
    # Refused, and said why: never counted (429), never a failure (5xx).
    "negative_data_rejection": {
        "expected-statuses": ["400", "401", "403", "404", "405", "413", "415", "422"]
    },
    # A body the schema allows can still break a rule no schema states (a rate string's
    # grammar, a granularity that must fit its window): a 422, never a 400 or a 5xx.
    # 303: the dashboard's sign-in and sign-out answer a form with a redirect.
    "positive_data_acceptance": {
        "expected-statuses": ["2xx", "303", "401", "403", "404", "422", "429"]
    },
}
CONFIG = schemathesis.Config.from_dict(
    {"auth": {"openapi": {"bearer": {"bearer": TOKEN}}}, "checks": CHECKS}
)
#: With no admin token the admin routes answer 404 to everyone, token or none.
# Switched off, the dashboard's routes are not there at all: 404 whatever the method.
OFF = schemathesis.Config.from_dict(
    {
        "checks": {
            **CHECKS,
            "missing_required_header": {"enabled": False},
            "unsupported_method": {"enabled": False},
        }
    }
)


@pytest.fixture(autouse=True)
def _drawn_from_the_document_alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Hypothesis also draws strings and numbers from the constants in the source of every
    local module loaded so far, ratekeeper's: which modules those are depends on the tests that
    ran before, and what they hold changes with any change to ratekeeper's code, so the same
    derandomized run would draw other cases. Here it draws from the document alone."""
    monkeypatch.setattr(providers, "_get_local_constants", providers.Constants)
    providers.CONSTANTS_CACHE.cache.clear()  # what was drawn from them before
    yield
    providers.CONSTANTS_CACHE.cache.clear()


class _Current:
    """The app under test, replaced for each test: the schema's ASGI app, so that every
    request schemathesis makes (its probes without the token too) reaches it. schemathesis
    runs the app's lifespan for the length of one test."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


CURRENT = _Current()
api = schemathesis.openapi.from_dict(document(), config=CONFIG)
api.app = CURRENT
admin = schemathesis.openapi.from_dict(document(), config=OFF).include(
    path_regex="^/(v1/overrides|v1/stats|v1/top|dashboard)"
)
admin.app = CURRENT


def _app(directory: Path, admin_token: str | None) -> Any:
    clock = FakeClock(1_700_000_000.0)
    on = admin_token is not None  # the dashboard too: it needs the token
    return service_app(
        RULES, directory, clock, admin_token=admin_token, ietf_headers=True, dashboard=on
    )


@pytest.fixture
def with_token(tmp_path: Path) -> Iterator[None]:
    CURRENT.app = _app(tmp_path, TOKEN)
    yield
    CURRENT.app = None


@pytest.fixture
def without_token(tmp_path: Path) -> Iterator[None]:
    CURRENT.app = _app(tmp_path, None)
    yield
    CURRENT.app = None


@api.parametrize()
@FUZZ
def test_every_operation_answers_as_documented(case: Any, with_token: None) -> None:
    case.call_and_validate()


@admin.parametrize()
@FUZZ
def test_with_no_admin_token_the_admin_routes_and_the_dashboard_are_off(
    case: Any, without_token: None
) -> None:
    response = case.call_and_validate()
    assert response.status_code in (404, 405), response.text  # 405: a method no route has


def test_the_document_fuzzed_is_the_one_served(tmp_path: Path) -> None:
    from tests.service.asgi import AppClient

    with AppClient(_app(tmp_path, TOKEN)) as client:
        assert client.get("/openapi.json").json() == document()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    service = Served(
        tmp_path_factory.mktemp("served"),
        "--dashboard",
        environ={"RATEKEEPER_ADMIN_TOKEN": TOKEN},
    )
    yield service
    service.stop()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_a_served_process_answers_as_its_document_says(
    served: Served, mode: GenerationMode
) -> None:
    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json", config=CONFIG)

    @settings(FUZZ, max_examples=30)
    @given(case=schema.as_strategy(mode))
    def answers(case: Any) -> None:
        case.call_and_validate()

    answers()
    assert httpx.get(f"{served.url}/healthz", timeout=5).status_code == 200
