"""Limits on every view of a Flask ``Blueprint`` and of the whole app (``limit_views``), and
per-view limits on ``async def`` views."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from flask import Blueprint, Flask

from ratekeeper import Limit, Limiter, MemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit, keys
from ratekeeper.web.flask import RateLimiter


def minute(amount: int) -> Limit:
    return Limit(amount, 60, "sliding_log")


def build(clock: FakeClock, *blueprint_limits: RateLimit) -> Flask:
    """``/api/a``, ``/api/b``, ``/api/health``, ``POST /api/c`` (a limit of its own, 1 a
    minute) and ``/api/roomy`` (its own 10 a minute) in a blueprint limited by
    ``blueprint_limits`` (3 a minute by default); ``/outside`` off it."""
    app = Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)))
    api = Blueprint("api", __name__, url_prefix="/api")
    limits = blueprint_limits or (RateLimit(minute(3)),)
    limiter.limit_views(api, *limits, exempt=["/api/health"])

    @api.get("/a")
    def a() -> Any:
        return {"route": "a"}

    @api.get("/b")
    async def b() -> Any:
        await asyncio.sleep(0)
        return {"route": "b"}

    @api.get("/health")
    def health() -> Any:
        return {"status": "ok"}

    @api.post("/c")
    @limiter.limit(RateLimit(minute(1)))
    def c() -> Any:
        return {"route": "c"}

    @api.get("/roomy")
    @limiter.limit(RateLimit(minute(10)))
    def roomy() -> Any:
        return {"route": "roomy"}

    app.register_blueprint(api)

    @app.get("/outside")
    def outside() -> Any:
        return {"route": "outside"}

    return app


def statuses(app: Flask, calls: list[str]) -> list[Any]:
    client = app.test_client()
    answers = []
    for call in calls:
        method, path = call.split()
        answers.append(client.open(path, method=method))
    return answers


def test_a_blueprint_limit_counts_its_views_together_and_no_other(clock: FakeClock) -> None:
    app = build(clock)
    calls = ["GET /api/a", "GET /api/b", "GET /outside", "GET /api/a", "GET /api/b"]
    calls += ["GET /api/a", "GET /outside", "GET /outside"]
    answers = statuses(app, calls)
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 429, 429, 200, 200]
    assert answers[1].json == {"route": "b"}
    assert [a.headers.get("X-RateLimit-Remaining") for a in answers[:4]] == ["2", "1", None, "0"]
    refused = answers[4]
    assert refused.headers["Content-Type"] == "application/problem+json"
    assert refused.headers["Retry-After"] == "60"
    assert refused.headers.getlist("X-RateLimit-Limit") == ["3"]
    assert refused.json["type"] == "urn:ratekeeper:problem:rate-limited"
    clock.advance(60)  # the window has passed: the blueprint's views are admitted again
    assert [a.status_code for a in statuses(app, ["GET /api/b", "GET /api/a"])] == [200, 200]


def test_an_exempt_path_of_the_blueprint_is_never_counted(clock: FakeClock) -> None:
    calls = ["GET /api/health"] * 4 + ["GET /api/a"] * 4 + ["GET /api/health"]
    answers = statuses(build(clock), calls)
    assert [a.status_code for a in answers] == [200] * 7 + [429, 200]
    assert "X-RateLimit-Limit" not in answers[0].headers


def test_the_blueprint_limit_and_the_views_own_both_apply_blueprint_first(
    clock: FakeClock,
) -> None:
    answers = statuses(build(clock), ["POST /api/c", "POST /api/c", "GET /api/a", "GET /api/b"])
    assert [a.status_code for a in answers] == [200, 429, 200, 429]
    # Admitted: the headers show the closer of the two, the view's 1 (none left), once.
    assert answers[0].headers.getlist("X-RateLimit-Limit") == ["1"]
    assert answers[0].headers["X-RateLimit-Remaining"] == "0"
    # Refused by the view's limit, after the blueprint's had counted it: its own headers.
    assert answers[1].headers.getlist("X-RateLimit-Limit") == ["1"]
    assert answers[2].headers["X-RateLimit-Limit"] == "3"
    assert answers[2].headers["X-RateLimit-Remaining"] == "0"  # c, c and a: 3 of 3


def test_an_admitted_view_tells_of_the_blueprint_limit_when_it_is_the_closer(
    clock: FakeClock,
) -> None:
    answers = statuses(build(clock), ["GET /api/a", "GET /api/roomy", "GET /api/roomy"])
    assert [a.status_code for a in answers] == [200, 200, 200]
    # The blueprint's 3 (none left) is closer than the view's 10 (8 left).
    assert answers[2].headers.getlist("X-RateLimit-Limit") == ["3"]
    assert answers[2].headers.getlist("X-RateLimit-Remaining") == ["0"]
    assert answers[1].headers["X-RateLimit-Remaining"] == "1"


def test_a_blueprint_limit_on_some_methods_counts_only_those(clock: FakeClock) -> None:
    app = build(clock, RateLimit(minute(1), methods=["POST"]))
    answers = statuses(app, ["GET /api/a"] * 3 + ["POST /api/c", "GET /api/b", "POST /api/c"])
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 200, 429]
    assert "X-RateLimit-Limit" not in answers[0].headers


def test_a_shadow_blueprint_limit_logs_and_never_refuses(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = build(clock, RateLimit(minute(2), shadow=True))
    with caplog.at_level(logging.INFO, logger="ratekeeper.web"):
        answers = statuses(app, ["GET /api/a", "GET /api/b", "GET /api/a", "GET /api/b"])
    assert [a.status_code for a in answers] == [200] * 4
    assert "X-RateLimit-Limit" not in answers[3].headers
    assert len([r for r in caplog.records if "shadow mode" in r.getMessage()]) == 2


def test_an_app_wide_limit_counts_every_request(clock: FakeClock) -> None:
    app = build(clock)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)))
    limiter.limit_views(app, RateLimit(minute(4)))
    calls = ["GET /outside", "GET /api/a", "GET /nowhere", "GET /api/b", "GET /outside"]
    answers = statuses(app, calls)
    assert [a.status_code for a in answers] == [200, 200, 404, 200, 429]
    # /api/a passed both: the blueprint's 3 (2 left) and the app's 4 (2 left); /api/b the
    # app's last one.
    assert answers[1].headers["X-RateLimit-Remaining"] == "2"
    assert answers[3].headers["X-RateLimit-Limit"] == "4"
    assert answers[3].headers["X-RateLimit-Remaining"] == "0"


def test_a_blueprint_limit_in_a_named_scope_is_shared(clock: FakeClock) -> None:
    app = Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)))
    for name in ("v1", "v2"):
        version = Blueprint(name, __name__, url_prefix=f"/{name}")
        limiter.limit_views(version, RateLimit(minute(3), key=keys.header("X-User", "user")))
        limiter.limit_views(version, RateLimit(minute(2)), scope="versions")
        version.add_url_rule("/items", "items", lambda: "ok")
        app.register_blueprint(version)
    client = app.test_client()
    alice = {"X-User": "alice"}
    answers = [client.get(p, headers=alice).status_code for p in ["/v1/items", "/v2/items"] * 2]
    assert answers == [200, 200, 429, 429]


def test_limit_views_is_checked() -> None:
    limiter = RateLimiter(Limiter())
    with pytest.raises(TypeError, match="Flask app or Blueprint"):
        limiter.limit_views(object(), RateLimit("1/minute"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        limiter.limit_views(Flask(__name__))
    with pytest.raises(ValueError, match="starts with '/'"):
        limiter.limit_views(Flask(__name__), RateLimit("1/minute"), exempt=["health"])
    app = Flask(__name__)
    late = Blueprint("late", __name__)
    app.register_blueprint(late)
    app.test_client().get("/")
    with pytest.raises(AssertionError, match="already been registered"):
        limiter.limit_views(late, RateLimit("1/minute"))  # too late to hook its requests
    with pytest.raises(AssertionError, match="first request"):
        limiter.limit_views(app, RateLimit("1/minute"))


def test_an_async_view_is_limited_like_a_sync_one(clock: FakeClock) -> None:
    app = Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)))

    @app.get("/items/<int:number>")
    @limiter.limit(RateLimit(minute(2), key=keys.client_ip() + keys.route()))
    async def item(number: int) -> Any:
        await asyncio.sleep(0)
        return {"item": number}

    client = app.test_client()
    answers = [client.get(f"/items/{n}") for n in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[0].json == {"item": 0}
    assert answers[0].headers["X-RateLimit-Remaining"] == "1"
    assert answers[2].headers["Retry-After"] == "60"
    assert answers[2].headers["Content-Type"] == "application/problem+json"
    other = client.get("/items/9", environ_base={"REMOTE_ADDR": "198.51.100.9"})
    assert other.status_code == 200


def test_a_blueprint_limit_charged_by_outcome_counts_only_failures() -> None:
    """A blueprint-wide limit charging 401s only: good logins are given back by the layer's
    ``after_request``, wrong ones count, a view that raises is settled by its teardown (its
    500 is not charged), and one answered 500 by Flask too."""
    clock = FakeClock(1_700_000_000.0)
    app = Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)))
    auth = Blueprint("auth", __name__, url_prefix="/auth")
    limiter.limit_views(auth, RateLimit(minute(3), charge_statuses={401}))

    @auth.post("/login/<password>")
    def login(password: str) -> Any:
        if password == "boom":
            raise RuntimeError("the view failed")
        return ({"ok": True}, 200) if password == "right" else ({"ok": False}, 401)

    app.register_blueprint(auth)
    app.testing = True  # exceptions propagate: the teardown settles the view that raised
    client = app.test_client()
    assert [client.post("/auth/login/right").status_code for _ in range(10)] == [200] * 10
    with pytest.raises(RuntimeError):
        client.post("/auth/login/boom")
    app.testing = False
    assert client.post("/auth/login/boom").status_code == 500  # not charged: given back
    assert [client.post("/auth/login/wrong").status_code for _ in range(4)] == [401] * 3 + [429]
    assert client.post("/auth/login/right").status_code == 429  # locked out


def test_a_view_inside_a_charged_blueprint_settles_both_layers() -> None:
    """The view's own limit and the blueprint's, both charged by outcome: settled together with
    the view's status; a request the view's limit refuses settles the blueprint's with 429."""
    clock = FakeClock(1_700_000_000.0)
    app = Flask(__name__)
    limiter = RateLimiter(Limiter(MemoryStore(clock=clock)))
    auth = Blueprint("auth", __name__, url_prefix="/auth")
    limiter.limit_views(auth, RateLimit(minute(5), charge_statuses={401}))

    @auth.post("/login/<password>")
    @limiter.limit(RateLimit(minute(2), charge_statuses={401}))
    def login(password: str) -> Any:
        return ({"ok": True}, 200) if password == "right" else ({"ok": False}, 401)

    app.register_blueprint(auth)
    client = app.test_client()
    assert [client.post("/auth/login/right").status_code for _ in range(6)] == [200] * 6
    answers = [client.post("/auth/login/wrong").status_code for _ in range(4)]
    assert answers == [401, 401, 429, 429]
    # The blueprint counted only the two 401s: three more failures fit under its 5 elsewhere.
    assert limiter.decider.peek("scope:auth|remote_address:127.0.0.1", minute(5)).remaining == 3
