"""The dashboard's record and figures, under a fake clock: the decisions of each second exactly,
the keys of a window of slots, memory bounded whatever the number of keys, the heavy keys of a
Zipf stream of 1,000,000 hits over 100,000 keys found within the stated bound (one recorder,
and two whose records add up through their files, as two workers' do); then its routes: off
unless asked for, and only for the holder of the admin token."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from ratekeeper import AsyncEngine, Engine
from ratekeeper.config import open_config_store
from ratekeeper.engine import Status
from ratekeeper.rules import parse_rules
from ratekeeper.service.dashboard import Dashboard, Recorder, SharedShots, stats
from ratekeeper.service.dashboard.recorder import HISTORY, SLOT
from ratekeeper.service.http.openapi import document
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.service.runtime.app import create_app
from ratekeeper.stores.memory import AsyncMemoryStore, MemoryStore
from ratekeeper.testing import FakeClock
from tests.service.asgi import AppClient

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}
  - key: path
    value: /login
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5}
"""
TOKEN = "dashboard-admin-token-0123456789"
START = 1_800_000_000.0  # a slot's first second


def user(name: str) -> list[list[tuple[str, str]]]:
    return [[("user", name)]]


class Recorded:
    """An engine on a fake clock, its metrics, and the dashboard's recorder of both."""

    def __init__(self, capacity: int = 1000) -> None:
        self.clock = FakeClock(START)
        self.engine = Engine(MemoryStore(clock=self.clock), rules=parse_rules(RULES, "r.yaml"))
        self.metrics = Metrics()
        self.metrics.track(self.engine)
        self.recorder = Recorder(self.engine, self.metrics, capacity=capacity, clock=self.clock)

    def check(self, name: str, times: int = 1) -> None:
        for _ in range(times):
            self.engine.check("api", user(name))

    def second(self) -> None:
        """The clock to the next second, and the tick that follows it."""
        self.clock.set(int(self.clock()) + 1 + 0.005)
        self.recorder.tick()


def test_each_second_counts_the_decisions_it_saw_by_rule_and_result() -> None:
    recorded = Recorded()
    recorded.check("a", 5)  # 3 allowed, 2 limited
    recorded.check("b")
    recorded.second()
    recorded.check("b", 3)  # 2 allowed, 1 limited
    recorded.second()
    recorded.second()  # nothing decided: no entry
    shot = recorded.recorder.shot()
    per_user = ("api", "per-user")
    assert shot.seconds == [
        (int(START), {(*per_user, "allowed"): 4, (*per_user, "limited"): 2}),
        (int(START) + 1, {(*per_user, "allowed"): 2, (*per_user, "limited"): 1}),
    ]
    series, rows = stats.series([shot], shot.at, recorded.engine.rules)
    assert series["start"] == int(shot.at) - HISTORY + 1
    assert series["allowed"][-4:] == [4, 2, 0, 0]  # the current second last, still empty
    assert series["limited"][-4:] == [2, 1, 0, 0]
    assert [(row["domain"], row["rule"], row["limit"], row["algorithm"]) for row in rows] == [
        ("api", "per-user", "3/minute", "fixed_window")
    ]
    assert rows[0]["allowed"] == series["allowed"]


def test_the_top_keys_are_those_of_the_window_asked() -> None:
    recorded = Recorded()
    recorded.check("old", 7)
    for _ in range(SLOT):
        recorded.second()
    recorded.check("new", 4)
    shot = recorded.recorder.shot()
    recent = stats.top([shot], shot.at, SLOT, 10, 1000)
    assert [(one["key"], one["count"]) for one in recent["requests"]["keys"]] == [("user:new", 4)]
    assert (recent["span"], recent["requests"]["total"]) == (0, 4)
    since_start = stats.top([shot], shot.at, 60, 10, 1000)  # no more than was recorded
    assert (since_start["span"], since_start["requests"]["total"]) == (10, 11)
    both = stats.top([shot], shot.at, 2 * SLOT, 10, 1000)
    assert [(one["key"], one["count"]) for one in both["requests"]["keys"]] == [
        ("user:old", 7),
        ("user:new", 4),
    ]
    assert [(one["key"], one["count"]) for one in both["refused"]["keys"]] == [
        ("user:old", 4),
        ("user:new", 1),
    ]
    first = both["refused"]["keys"][0]
    assert first == {
        "domain": "api",
        "key": "user:old",
        "count": 4,
        "at_most": 4,
        "rule": "per-user",
        "limit": "3/minute",
        "algorithm": "fixed_window",
        "remaining": 0,
        "allowed": False,
    }
    for _ in range(HISTORY):  # the old slot ages out of the record
        recorded.second()
    shot = recorded.recorder.shot()
    assert int(START) not in shot.slots
    assert stats.top([shot], shot.at, HISTORY, 10, 1000)["requests"]["total"] == 0


def test_memory_stays_bounded_whatever_the_number_of_keys() -> None:
    recorded = Recorded(capacity=10)
    recorder = recorded.recorder
    for n in range(10_000):
        recorded.check(f"k{n}")
        assert len(recorder._pending) <= 40
        if n % 500 == 0:
            recorded.second()
    shot = recorder.shot()
    for slot in shot.slots.values():
        assert len(slot.requests.counts) <= 10 and len(slot.refused.counts) <= 10
    held = sum(len(one.requests.counts) + len(one.refused.counts) for one in shot.slots.values())
    assert len(recorder._statuses) <= held  # only the keys some summary holds ...
    recorded.clock.advance(HISTORY + 2 * SLOT)
    recorder.tick()
    assert not recorder._statuses  # ... and none once their slots are gone


def zipf(hits: int, keys: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    names = [f"user:{n}" for n in range(keys)]
    return rng.choices(names, [1 / (rank + 1) for rank in range(keys)], k=hits)


def statuses_of(names: set[str]) -> dict[str, tuple[Status, Status]]:
    """An allowed and a refused status of each key, as an engine makes them."""
    engine = Engine(MemoryStore(), rules=parse_rules(RULES, "r.yaml"))
    allowed = engine.check("api", user("x")).statuses[0]
    refused = allowed._replace(allowed=False)
    return {
        name: (allowed._replace(identity=f"api/{name}"), refused._replace(identity=f"api/{name}"))
        for name in names
    }


def replay(recorders: list[Recorded], stream: list[str], seconds: int) -> None:
    """``stream`` decided over ``seconds`` seconds, hit i by recorder i % len(recorders); every
    third hit of a key is refused."""
    made = statuses_of(set(stream))
    seen: Counter[str] = Counter()
    per_second = len(stream) // seconds
    for second in range(seconds):
        for index in range(second * per_second, (second + 1) * per_second):
            name = stream[index]
            seen[name] += 1
            status = made[name][seen[name] % 3 == 0]
            recorders[index % len(recorders)].recorder._observe("api", (status,))
        for recorded in recorders:
            recorded.second()


@pytest.mark.parametrize("processes", [1, 2])
def test_the_heavy_keys_of_a_zipf_stream_are_found_within_the_stated_bound(
    processes: int, tmp_path: Path
) -> None:
    stream = zipf(1_000_000, 100_000, seed=processes)
    recorders = [Recorded() for _ in range(processes)]
    replay(recorders, stream, 50)
    shots = [recorded.recorder.shot() for recorded in recorders]
    if processes > 1:  # the second one's record read back from its files, as a worker's
        shared = SharedShots(str(tmp_path))
        shots[1].pid = 1
        shared.publish(shots[1])
        shots = [shots[0], *shared.others(0)]
    now = shots[0].at
    found = stats.top(shots, now, 60, 10, 1000)
    truth = Counter(stream)
    refused = Counter({name: count // 3 for name, count in truth.items()})
    for listed, exact in ((found["requests"], truth), (found["refused"], refused)):
        assert listed["total"] == sum(exact.values())
        assert listed["bound"] == listed["total"] // 1001
        assert listed["error"] <= listed["bound"]
        top = {one["key"] for one in listed["keys"]}
        assert top == {name for name, _ in exact.most_common(10)}
        for one in listed["keys"]:
            true_count = exact[one["key"]]
            assert one["count"] <= true_count <= one["count"] + listed["error"] == one["at_most"]


# The routes.


def app_of(tmp_path: Path, *, dashboard: bool = True) -> Any:
    clock = FakeClock(START)
    engine = AsyncEngine(
        AsyncMemoryStore(clock=clock),
        rules=parse_rules(RULES, "rules.yaml"),
        config=open_config_store(f"sqlite:///{tmp_path}/config.db"),
        clock=clock,
    )
    metrics = Metrics()
    metrics.track(engine)
    shown = None
    if dashboard:
        recorder = Recorder(engine, metrics, clock=clock)
        shown = Dashboard(engine, metrics, recorder, TOKEN, clock=clock)
    app = create_app(engine, admin_token=TOKEN, close_engine=True, metrics=metrics, dashboard=shown)
    return app, shown, clock


@pytest.fixture
def client(tmp_path: Path) -> Iterator[AppClient]:
    app, _, _ = app_of(tmp_path)
    with AppClient(app) as client:
        yield client


BEARER = {"Authorization": f"Bearer {TOKEN}"}
LOOKING = ["/v1/stats", "/v1/top", "/dashboard/assets/dashboard.js"]


def test_it_is_off_unless_asked_for(tmp_path: Path) -> None:
    app, _, _ = app_of(tmp_path, dashboard=False)
    with AppClient(app) as client:
        for path in [*LOOKING, "/dashboard"]:
            assert client.get(path, headers=BEARER).status_code == 404, path
        assert client.post("/dashboard/login", data={"token": TOKEN}).status_code == 404


@pytest.mark.parametrize("path", LOOKING)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-0123456789abcdef"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Cookie": "ratekeeper_dashboard=" + TOKEN},  # the cookie holds an HMAC, not the token
    ],
)
def test_without_the_token_nothing_is_shown(
    client: AppClient, path: str, headers: dict[str, str]
) -> None:
    answer = client.get(path, headers=headers)
    assert answer.status_code == 401
    assert answer.headers["content-type"] == "application/problem+json"
    assert "user" not in answer.text


def test_the_page_asks_for_the_token_and_signs_in_with_it(client: AppClient) -> None:
    form = client.get("/dashboard")
    assert form.status_code == 401
    assert 'action="/dashboard/login"' in form.text and "not the admin token" not in form.text
    wrong = client.post("/dashboard/login", data={"token": "nope"})
    assert wrong.status_code == 401 and "not the admin token" in wrong.text
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    many = "=null&0=null&1=null&00=null&token=200&token=" + TOKEN
    assert client.post("/dashboard/login", content=many, headers=form).status_code == 401
    assert client.post("/dashboard/login", content=b"\xff\xfe", headers=form).status_code == 401
    huge = client.post("/dashboard/login", content="token=" + "x" * 5000, headers=form)
    assert huge.status_code == 413
    signed = client.post("/dashboard/login", data={"token": TOKEN})
    assert (signed.status_code, signed.headers["location"]) == (303, "/dashboard")
    cookie = signed.headers["set-cookie"]
    assert TOKEN not in cookie
    assert all(part in cookie for part in ("HttpOnly", "SameSite=strict", "Path=/"))
    value = cookie.split(";")[0]
    assert client.get("/v1/stats", headers={"Cookie": value}).status_code == 200
    by_address = client.get(f"/dashboard?token={TOKEN}")
    assert by_address.status_code == 303 and by_address.headers["set-cookie"].startswith(value)
    assert client.get("/dashboard?token=wrong").status_code == 401
    out = client.post("/dashboard/logout")
    assert out.status_code == 303 and 'ratekeeper_dashboard=""' in out.headers["set-cookie"]


def test_the_page_and_its_files_are_served_to_the_signed_in(client: AppClient) -> None:
    page = client.get("/dashboard", headers=BEARER)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "/dashboard/assets/dashboard.js" in page.text
    script = client.get("/dashboard/assets/dashboard.js", headers=BEARER)
    assert script.status_code == 200 and "/v1/stats" in script.text
    assert client.get("/dashboard/assets/dashboard.css", headers=BEARER).status_code == 200
    assert client.get("/dashboard/assets/..%2Fpage.html", headers=BEARER).status_code == 404
    assert client.get("/dashboard/assets/recorder.py", headers=BEARER).status_code == 404


@pytest.mark.parametrize(
    "query",
    [
        "window=9",
        "window=301",
        "window=-60",
        "window=1e2",
        "window=NaN",
        "window=",
        "n=0",
        "n=101",
        "n=ten",
        "window=60&n=%00",
    ],
)
def test_a_window_or_a_count_out_of_range_is_refused(client: AppClient, query: str) -> None:
    answer = client.get(f"/v1/top?{query}", headers=BEARER)
    assert answer.status_code == 422, answer.text
    assert answer.json()["pointer"] in ("/query/window", "/query/n")


def test_the_figures_are_those_of_the_decisions_and_match_the_document(tmp_path: Path) -> None:
    app, dashboard, clock = app_of(tmp_path)
    check = {"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}]}
    clock.set(START + 1.005)  # the second ticks attribute to is START, whenever they run
    with AppClient(app) as client:
        for _ in range(5):
            client.post("/v1/check", json=check)
        override = {"capacity": 9, "time_window_sec": 60}
        client.put("/v1/overrides/user:bob", json=override, headers=BEARER)
        dashboard.recorder.tick()
        body = client.get("/v1/stats", headers=BEARER).json()
        top = client.get("/v1/top?window=10&n=1", headers=BEARER).json()
    doc = document()
    for name, found in (("Stats", body), ("Top", top)):
        schema = {**doc["components"]["schemas"][name], "components": doc["components"]}
        jsonschema_rs.Draft202012Validator(schema).validate(found)
    assert (sum(body["series"]["allowed"]), sum(body["series"]["limited"])) == (3, 2)
    assert body["series"]["allowed"][-2:] == [3, 0]
    assert body["workers"] == 1
    assert body["store"]["ok"] is True and body["store"]["breaker"] == "closed"
    assert body["config"] == {"ok": True, "error": None}
    assert body["overrides"]["items"][0]["key"] == "user:bob"
    assert [one["key"] for one in body["tree"][0]["descriptors"]] == ["user", "path"]
    login = body["tree"][0]["descriptors"][1]
    assert (login["value"], login["limit"], login["children"][0]["limit"]) == (
        "/login",
        None,
        "5/second",
    )
    http = next(one for one in body["latency"]["surfaces"] if one["surface"] == "http")
    assert http["count"] == 5 and 0 < http["p50"] <= http["p99"]
    assert top["requests"]["keys"] == [
        {
            "domain": "api",
            "key": "user:ann",
            "count": 5,
            "at_most": 5,
            "rule": "per-user",
            "limit": "3/minute",
            "algorithm": "fixed_window",
            "remaining": 0,
            "allowed": False,
        }
    ]


def test_a_peek_is_no_decision_in_the_figures(tmp_path: Path) -> None:
    """Looking at a key (``/v1/peek``, or a check of cost 0) changes nothing the dashboard or
    the metrics say of it: not its count, not its refusals, not its latest decision."""
    app, dashboard, clock = app_of(tmp_path)
    check = {"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}]}
    clock.set(START + 1.005)
    with AppClient(app) as client:
        for _ in range(2):
            client.post("/v1/check", json=check)
        for _ in range(3):
            assert client.post("/v1/peek", json=check).json()["statuses"][0]["remaining"] == 1
            looking = [{"entries": [{"key": "user", "value": "ann"}], "hits_addend": 0}]
            assert (
                client.post("/v1/check", json={**check, "descriptors": looking}).status_code == 200
            )
        dashboard.recorder.tick()
        body = client.get("/v1/stats", headers=BEARER).json()
        top = client.get("/v1/top?window=10&n=1", headers=BEARER).json()
        metrics = client.get("/metrics").text
    assert (sum(body["series"]["allowed"]), sum(body["series"]["limited"])) == (2, 0)
    http = next(one for one in body["latency"]["surfaces"] if one["surface"] == "http")
    assert http["count"] == 2 + 3  # the checks of cost 0 are timed as the checks they are
    (listed,) = top["requests"]["keys"]
    assert (listed["count"], listed["remaining"], listed["allowed"]) == (2, 1, True)
    assert top["refused"]["keys"] == []
    assert 'ratekeeper_decisions_total{domain="api",result="allowed",rule="per-user"} 2.0' in (
        metrics
    )


def test_every_route_of_the_dashboard_is_in_the_document(tmp_path: Path) -> None:
    app, _, _ = app_of(tmp_path)
    paths = document()["paths"]
    for route in app.routes:
        if route.path.startswith(("/dashboard", "/v1/stats", "/v1/top")):
            assert route.path in paths, route.path
            assert {method.lower() for method in route.methods} - {"head"} <= paths[
                route.path
            ].keys()


def test_latency_quantiles_interpolate_within_their_bucket() -> None:
    counts = [0] * 14
    counts[2] = 100  # all between 0.1 and 0.25 ms
    assert stats.quantile(0.5, counts) == pytest.approx(0.000_175)
    assert stats.quantile(0.99, counts) == pytest.approx(0.000_1 + 0.000_15 * 0.99)
    counts[13] = 1_000  # most above the largest bucket: the largest bound
    assert stats.quantile(0.99, counts) == 1.0
    assert stats.quantile(0.5, [0] * 14) is None
