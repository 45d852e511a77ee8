"""Login attempts limited by username and by address together: 5 per username and 20 per
address in any 15 minutes, behind a trusted proxy. A botnet spreading its guesses over many
addresses is stopped at the account, one address trying many accounts is stopped at the
address, and with all-or-nothing a refused attempt uses up neither limit."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from ratekeeper import AsyncLimiter, AsyncMemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit, keys
from ratekeeper.web.fastapi import RateLimiter
from tests.web.asgi_client import client

PROXY = "10.0.0.1"


class Login(BaseModel):
    username: str
    password: str


def login_app(clock: FakeClock) -> FastAPI:
    app = FastAPI()
    store = AsyncMemoryStore(clock=clock)
    limiter = RateLimiter(AsyncLimiter(store, algorithm="sliding_log"))
    limiter.install(app)
    attempts = limiter.limit(
        RateLimit("5/15m", key=keys.field("username", str.casefold), scope="login-username"),
        RateLimit("20/15m", key=keys.client_ip(trusted=["10.0.0.0/8"]), scope="login-ip"),
    )

    @app.post("/login", dependencies=[Depends(attempts)])
    async def login(form: Login) -> JSONResponse:
        if form.password != "right":
            return JSONResponse({"error": "wrong password"}, status_code=401)
        return JSONResponse({"welcome": form.username})

    return app


class Attempts:
    """Login attempts through the proxy, each from a client address of the caller's choice."""

    def __init__(self, app: FastAPI) -> None:
        self.loop = asyncio.new_event_loop()
        self.session = client(app, PROXY)

    def __call__(self, address: str, username: str, password: str = "wrong") -> int:
        answer: httpx.Response = self.loop.run_until_complete(
            self.session.post(
                "/login",
                json={"username": username, "password": password},
                headers={"X-Forwarded-For": address},
            )
        )
        return answer.status_code

    def close(self) -> None:
        self.loop.run_until_complete(self.session.aclose())
        self.loop.close()


@pytest.fixture
def attempt(clock: FakeClock) -> Iterator[Attempts]:
    attempts = Attempts(login_app(clock))
    yield attempts
    attempts.close()


def test_many_addresses_against_one_username_are_stopped(attempt: Attempts) -> None:
    statuses = [attempt(f"198.51.100.{n}", "alice") for n in range(10)]
    assert statuses == [401] * 5 + [429] * 5
    # Even the right password waits: the account is closed to guesses for now...
    assert attempt("198.51.100.99", "Alice", "right") == 429
    # ...while other accounts, from the same addresses, are not.
    assert attempt("198.51.100.1", "bob", "right") == 200


def test_many_usernames_from_one_address_are_stopped(attempt: Attempts) -> None:
    statuses = [attempt("203.0.113.7", f"user{n}") for n in range(25)]
    assert statuses == [401] * 20 + [429] * 5
    assert attempt("203.0.113.8", "user0") == 401  # another address, the same user: fine


def test_a_refused_attempt_consumes_neither_limit(attempt: Attempts, clock: FakeClock) -> None:
    # alice's 5 used up from one address; 10 more tries from a second address are refused...
    assert [attempt("198.51.100.1", "alice") for _ in range(5)] == [401] * 5
    assert [attempt("198.51.100.2", "alice") for _ in range(10)] == [429] * 10
    # ...and took nothing of that address's 20.
    assert [attempt("198.51.100.2", f"user{n}") for n in range(20)] == [401] * 20
    assert attempt("198.51.100.2", "zoe") == 429
    # That address's refused attempt took nothing of zoe's 5 either.
    assert [attempt("198.51.100.3", "zoe") for _ in range(6)] == [401] * 5 + [429]
    # 15 minutes later, every limit is back.
    clock.advance(15 * 60)
    assert attempt("198.51.100.2", "alice", "right") == 200


def test_a_client_cannot_escape_the_address_limit_by_forging_its_address(
    attempt: Attempts,
) -> None:
    # The proxy appends what it saw; whatever the client wrote before it is not believed.
    statuses = [attempt(f"1.1.1.{n}, 203.0.113.9", f"user{n}") for n in range(21)]
    assert statuses == [401] * 20 + [429]
