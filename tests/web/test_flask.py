"""Per-route limits on Flask views, and the WSGI middleware in front of a Flask app."""

from __future__ import annotations

import io
from typing import Any

from flask import Flask, jsonify, request

from ratekeeper import Limit, Limiter, MemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit, keys
from ratekeeper.web.flask import RateLimiter
from ratekeeper.web.wsgi import RateLimitMiddleware


def hour(amount: int) -> Limit:
    return Limit(amount, 3600, "sliding_log")


def build(clock: FakeClock) -> Flask:
    app = Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)))
    uploads = RateLimit(hour(3), key=keys.header("X-User", "user"), scope="uploads")

    @app.get("/items/<int:item_id>")
    @limiter.limit(RateLimit(hour(1)))
    def item(item_id: int) -> Any:
        return {"item": item_id}

    @app.post("/photos")
    @limiter.limit(uploads)
    def photo() -> Any:
        return {"kind": "photo"}

    @app.post("/videos")
    @limiter.limit(uploads)
    def video() -> Any:
        return {"kind": "video"}

    @app.post("/login")
    @limiter.limit(
        RateLimit(hour(2), key=keys.field("username", str.casefold), scope="login-user"),
        RateLimit(hour(4), scope="login-ip"),
    )
    def login() -> Any:
        return jsonify(welcome=request.form["username"])

    return app


def test_a_view_decorator_limits_by_route_and_sets_headers(clock: FakeClock) -> None:
    client = build(clock).test_client()
    first, second = client.get("/items/1"), client.get("/items/2")
    assert first.status_code == 200 and first.json == {"item": 1}
    assert first.headers["X-RateLimit-Remaining"] == "0"
    assert second.status_code == 429
    assert second.headers["Content-Type"] == "application/problem+json"
    assert second.headers["Retry-After"] == "3600"
    assert second.json["type"] == "urn:ratekeeper:problem:rate-limited"  # type: ignore[index]


def test_views_sharing_a_scope_share_their_counters(clock: FakeClock) -> None:
    client = build(clock).test_client()
    alice = {"X-User": "alice"}
    statuses = [client.post(p, headers=alice).status_code for p in ["/photos", "/videos"] * 2]
    assert statuses == [200, 200, 200, 429]
    assert client.post("/videos", headers={"X-User": "bob"}).status_code == 200


def test_several_limits_on_a_view_and_the_form_still_reaches_it(clock: FakeClock) -> None:
    client = build(clock).test_client()
    answers = [client.post("/login", data={"username": n}) for n in ["Alice", "alice", "ALICE"]]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[0].json == {"welcome": "Alice"}
    # The refused third consumed nothing of the IP's 4: two more usernames pass.
    assert client.post("/login", data={"username": "bob"}).status_code == 200
    assert client.post("/login", data={"username": "carol"}).status_code == 200
    assert client.post("/login", data={"username": "dave"}).status_code == 429


def test_the_wsgi_middleware_on_a_flask_app(clock: FakeClock) -> None:
    app = Flask(__name__)

    @app.post("/echo")
    def echo() -> Any:
        size = len(request.get_data())
        return {"form": request.form.to_dict(), "size": size}

    @app.get("/health")
    def health() -> str:
        return "ok"

    limits = [RateLimit(hour(1), key=keys.field("username"), methods=["POST"])]
    app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, Limiter(MemoryStore(clock=clock)), limits, exempt=["/health"]
    )
    client = app.test_client()
    first = client.post("/echo", data={"username": "alice", "x": "1"})
    assert first.status_code == 200
    assert first.json == {"form": {"username": "alice", "x": "1"}, "size": 18}
    assert first.headers["X-RateLimit-Limit"] == "1"
    second = client.post("/echo", data={"username": "alice"})
    assert second.status_code == 429 and second.headers["Retry-After"] == "3600"
    assert client.post("/echo", data={"username": "bob"}).status_code == 200
    assert [client.get("/health").status_code for _ in range(3)] == [200, 200, 200]


def test_a_flask_view_over_the_remote_address_and_a_trusted_proxy(clock: FakeClock) -> None:
    app = Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)))

    @app.get("/")
    @limiter.limit(RateLimit(hour(1), key=keys.client_ip(trusted=["10.0.0.0/8"])))
    def home() -> str:
        return "ok"

    client = app.test_client()

    def status(peer: str, forwarded: str) -> int:
        environ = {"REMOTE_ADDR": peer}
        headers = {"X-Forwarded-For": forwarded}
        return client.get("/", environ_base=environ, headers=headers).status_code

    assert [status("203.0.113.7", f"1.1.1.{n}") for n in range(2)] == [200, 429]
    assert [status("10.0.0.1", "198.51.100.1"), status("10.0.0.1", "198.51.100.1")] == [200, 429]


def test_route_limiter_options_are_checked_when_built() -> None:
    import pytest

    from ratekeeper import AsyncLimiter

    with pytest.raises(TypeError, match="asyncio"):
        RateLimiter(AsyncLimiter())
    with pytest.raises(TypeError, match="scope"):
        RateLimiter(Limiter(), scope="x")
    with pytest.raises(ValueError, match="max_body"):
        RateLimiter(Limiter(), max_body=-1)
    with pytest.raises(ValueError, match="RateLimit"):
        RateLimiter(Limiter()).limit()


def test_a_chunked_body_longer_than_max_body_is_a_413(clock: FakeClock) -> None:
    app = Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)), max_body=32)

    @app.post("/login")
    @limiter.limit(RateLimit(hour(5), key=keys.field("username")))
    def login() -> Any:
        return {"size": len(request.get_data())}

    def chunked(body: bytes) -> Any:
        return app.test_client().post(
            "/login",
            input_stream=io.BytesIO(body),
            content_type="application/x-www-form-urlencoded",
            environ_overrides={"wsgi.input_terminated": True, "CONTENT_LENGTH": ""},
        )

    assert chunked(b"username=alice").json == {"size": 14}
    too_long = chunked(b"username=alice&padding=" + b"x" * 32)
    assert too_long.status_code == 413
    assert too_long.json["type"] == "urn:ratekeeper:problem:too-large"  # type: ignore[index]


def test_a_header_the_view_sets_itself_is_kept(clock: FakeClock) -> None:
    app = Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)))

    @app.get("/own")
    @limiter.limit(RateLimit(hour(5)))
    def own() -> Any:
        return "ok", 200, {"x-ratelimit-limit": "mine"}

    answer = app.test_client().get("/own")
    assert answer.headers.getlist("X-RateLimit-Limit") == ["mine"]
    assert answer.headers["X-RateLimit-Remaining"] == "4"
