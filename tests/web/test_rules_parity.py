"""One rule file for the gateway and the application: the same YAML, with the same per-key
override, decides alike through the middleware (descriptors built from each request) and
through the decision service's Envoy endpoint (POST /json)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from flask import Flask
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratekeeper import AsyncEngine, Engine, Override, open_config_store
from ratekeeper.rules import parse_rules
from ratekeeper.service.runtime.app import create_app
from ratekeeper.web import keys
from ratekeeper.web.asgi import RateLimitMiddleware
from ratekeeper.web.wsgi import RateLimitMiddleware as WSGIMiddleware
from tests.service.asgi import AppClient
from tests.web.asgi_client import client

RULES = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 4, algorithm: gcra}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_log}
  - key: method
    value: POST
    descriptors:
      - key: path
        value: /login
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /health
"""

#: The requests: (peer, method, path, user).
REQUESTS = [
    ("10.0.0.1", "POST", "/login", "alice"),
    ("10.0.0.1", "POST", "/login", "bob"),
    ("10.0.0.1", "POST", "/login", "carol"),
    ("10.0.0.1", "GET", "/home", "alice"),
    ("10.0.0.2", "GET", "/home", "bob"),
    ("10.0.0.2", "GET", "/home", "bob"),
    ("10.0.0.3", "GET", "/home", "mallory"),
    ("10.0.0.3", "GET", "/home", "mallory"),
    ("10.0.0.3", "GET", "/health", None),
    ("10.0.0.1", "GET", "/home", None),
    ("10.0.0.2", "GET", "/home", "dave"),
]

#: The middleware's descriptors: nginx's, from the request itself.
DESCRIPTORS = [
    keys.client_ip(),
    keys.header("X-User", "user"),
    keys.path(),
    keys.method() + keys.path(),
]

#: One request's outcome: allowed, and the least remaining of the limits that applied.
Outcome = tuple[bool, int | None]


def config_url(tmp_path: Path, name: str) -> str:
    """A configuration store holding the override: mallory gets 1 an hour."""
    url = f"sqlite:///{tmp_path / name}"
    store = open_config_store(url)
    store.set("user:mallory", Override.from_dict({"time_window_sec": 3600, "capacity": 1}), "edge")
    store.close()
    return url


def engine_of(kind: Any, tmp_path: Path, name: str) -> Any:
    return kind(rules=parse_rules(RULES, "edge.yaml"), config=config_url(tmp_path, name))


def user_headers(user: str | None) -> dict[str, str]:
    return {"X-User": user} if user else {}


def outcome(status: int, headers: Any) -> Outcome:
    remaining = headers.get("x-ratelimit-remaining")
    return status == 200, None if remaining is None else int(remaining)


async def home(request: Any) -> PlainTextResponse:
    return PlainTextResponse("ok")


def through_asgi(tmp_path: Path, **options: Any) -> list[Outcome]:
    async def main() -> list[Outcome]:
        engine = engine_of(AsyncEngine, tmp_path, f"asgi-{len(options)}.db")
        app = Starlette(routes=[Route("/{rest:path}", home, methods=["GET", "POST"])])
        app.add_middleware(
            RateLimitMiddleware, decider=engine, domain="edge", descriptors=DESCRIPTORS, **options
        )
        found = []
        for peer, method, path, user in REQUESTS:
            async with client(app, peer) as session:
                answer = await session.request(method, path, headers=user_headers(user))
            found.append(outcome(answer.status_code, answer.headers))
        await engine.close()
        return found

    return asyncio.run(main())


def through_wsgi(tmp_path: Path) -> list[Outcome]:
    app = Flask(__name__)
    app.add_url_rule("/<path:rest>", "any", lambda rest: "ok", methods=["GET", "POST"])
    with engine_of(Engine, tmp_path, "wsgi.db") as engine:
        app.wsgi_app = WSGIMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, engine, domain="edge", descriptors=DESCRIPTORS
        )
        session = app.test_client()
        found = []
        for peer, method, path, user in REQUESTS:
            answer = session.open(
                path, method=method, headers=user_headers(user), environ_base={"REMOTE_ADDR": peer}
            )
            found.append(outcome(answer.status_code, {k.lower(): v for k, v in answer.headers}))
    return found


def through_envoy_json(tmp_path: Path) -> list[Outcome]:
    """What a gateway asks the decision service for the same requests."""
    engine = engine_of(AsyncEngine, tmp_path, "service.db")
    found: list[Outcome] = []
    with AppClient(create_app(engine, close_engine=True)) as service:
        for peer, method, path, user in REQUESTS:
            entries = [[("remote_address", peer)]]
            if user:
                entries.append([("user", user)])
            entries += [[("path", path)], [("method", method), ("path", path)]]
            body = {
                "domain": "edge",
                "descriptors": [
                    {"entries": [{"key": k, "value": v} for k, v in one]} for one in entries
                ],
            }
            answer = service.post("/json", json=body).json()
            left = [
                int(s.get("limitRemaining", 0)) for s in answer["statuses"] if "currentLimit" in s
            ]
            found.append((answer["overallCode"] == "OK", min(left) if left else None))
    return found


def test_the_same_rules_decide_alike_in_the_app_and_at_the_gateway(tmp_path: Path) -> None:
    gateway = through_envoy_json(tmp_path)
    assert [allowed for allowed, _ in gateway] == [
        True,  # 10.0.0.1's login 1 of 2
        True,  # login 2 of 2
        False,  # login 3: POST /login is over (its address hit counted, as in Envoy)
        True,  # 10.0.0.1's 4th of 4 by address
        True,
        True,
        True,  # mallory's override: 1 an hour
        False,
        True,  # /health is whitelisted, and 10.0.0.3 has room
        False,  # 10.0.0.1 is over its 4 by address
        True,
    ]
    assert through_asgi(tmp_path) == gateway
    assert through_wsgi(tmp_path) == gateway


def test_all_or_nothing_in_the_app_keeps_a_refused_request_from_counting(tmp_path: Path) -> None:
    found = through_asgi(tmp_path, all_or_nothing=True)
    # The refused third login took nothing of 10.0.0.1's 4 by address: its 4th request leaves 1.
    assert found[2] == (False, 0) and found[3] == (True, 1)
    assert found[9] == (True, 0)
