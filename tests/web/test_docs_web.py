"""Every example of docs/web.md runs as written, and does what the page says."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.web.asgi_client import run

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "web.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE, re.DOTALL)
EXAMPLES = {
    block.split("\n", 1)[0].removeprefix("# example: "): block
    for block in BLOCKS
    if block.startswith("# example: ")
}


@pytest.fixture
def load() -> Iterator[types.FunctionType]:
    loaded: list[str] = []

    def load_example(name: str) -> types.ModuleType:
        module = types.ModuleType(f"docs_web_{name}")
        sys.modules[module.__name__] = module
        loaded.append(module.__name__)
        exec(compile(EXAMPLES[name], f"docs/web.md ({name})", "exec"), module.__dict__)
        return module

    yield load_example  # type: ignore[misc]
    for name in loaded:
        sys.modules.pop(name, None)


def test_the_page_has_each_example() -> None:
    assert sorted(EXAMPLES) == [
        "django",
        "django-settings",
        "fastapi",
        "fastapi-routers",
        "flask",
        "flask-blueprints",
        "rules",
    ]


def test_the_limits_and_keys_block_builds() -> None:
    exec(compile(BLOCKS[0], "docs/web.md (limits)", "exec"), {})


def test_fastapi(load: types.FunctionType) -> None:
    app = load("fastapi").app

    async def steps(client: httpx.AsyncClient) -> dict[str, list[int]]:
        def via(address: str) -> dict[str, str]:
            return {"X-Forwarded-For": address}

        orders = [
            (await client.post("/orders", headers={"X-Client-App": "app-42", **via("1.0.0.1")}))
            for _ in range(6)
        ]
        good = [
            await client.post(
                "/login", json={"username": "Alice", "password": "right"}, headers=via("1.0.1.9")
            )
            for _ in range(20)
        ]
        assert [a.status_code for a in good] == [200] * 20  # never charged
        logins = [
            await client.post(
                "/login", json={"username": "Alice", "password": "x"}, headers=via(f"1.0.1.{n}")
            )
            for n in range(6)
        ]
        health = [await client.get("/health", headers=via("1.0.0.1")) for _ in range(3)]
        assert "x-ratelimit-limit" not in health[0].headers
        assert orders[5].headers["content-type"] == "application/problem+json"
        assert good[0].json() == {"welcome": "Alice"}
        return {
            "orders": [a.status_code for a in orders],
            "logins": [a.status_code for a in logins],
            "health": [a.status_code for a in health],
        }

    found = run(app, steps, peer="10.0.0.1")
    assert found == {
        "orders": [200] * 5 + [429],
        "logins": [401] * 5 + [429],
        "health": [200] * 3,
    }


def test_flask(load: types.FunctionType) -> None:
    client = load("flask").app.test_client()
    user = {"X-User": "alice"}
    uploads = [client.post(p, headers=user).status_code for p in ["/photos", "/videos"] * 6]
    assert uploads == [200] * 10 + [429] * 2
    good = [client.post("/login", data={"username": "bob", "password": "right"}) for _ in range(20)]
    assert [a.status_code for a in good] == [200] * 20  # never charged
    assert good[0].json == {"welcome": "bob"}
    assert good[0].headers["X-RateLimit-Limit"] == "5"
    logins = [client.post("/login", data={"username": "bob"}) for _ in range(6)]
    assert [a.status_code for a in logins] == [401] * 5 + [429]


def test_django(load: types.FunctionType) -> None:
    from django.test import Client, override_settings

    import tests.web.django_site  # noqa: F401  (Django's settings, with a user from X-User)

    module = load("django")
    with override_settings(ROOT_URLCONF=module.__name__):
        reader = Client(headers={"X-User": "alice"})
        stories = [reader.get(f"/stories/s{n}").status_code for n in range(4)]
        assert stories == [200, 200, 200, 429]
        assert Client(headers={"X-User": "bob"}).get("/stories/s1").status_code == 200
        searches = [Client().get("/search").status_code for _ in range(31)]
        assert searches == [200] * 30 + [429]


def test_fastapi_routers(load: types.FunctionType) -> None:
    app = load("fastapi-routers").app

    async def steps(client: httpx.AsyncClient) -> dict[str, list[int]]:
        key = {"X-API-Key": "k1"}
        api = [
            (await client.post("/api/orders", headers=key)).status_code,
            (await client.post("/api/orders", headers=key)).status_code,  # its own 1 a minute
            (await client.get("/api/orders", headers=key)).status_code,
            (await client.get("/api/orders", headers=key)).status_code,  # the router's 3
            (await client.get("/api/orders", headers={"X-API-Key": "k2"})).status_code,
        ]
        health = [(await client.get("/api/health", headers=key)).status_code for _ in range(3)]
        anonymous = [(await client.get("/api/orders")).status_code for _ in range(95)]
        return {"api": api, "health": health, "anonymous": anonymous}

    found = run(app, steps)
    # The app's 100 a minute per client: 5 + 3 counted before, and 92 of the 95 passed.
    assert found == {
        "api": [200, 429, 200, 429, 200],
        "health": [200] * 3,
        "anonymous": [200] * 92 + [429] * 3,
    }


def test_flask_blueprints(load: types.FunctionType) -> None:
    client = load("flask-blueprints").app.test_client()
    key = {"X-API-Key": "k1"}
    api = [
        client.post("/api/reports", headers=key),
        client.post("/api/reports", headers=key),  # its own 1 a minute
        client.get("/api/reports", headers=key),  # an async view
        client.get("/api/reports", headers=key),  # the blueprint's 3
        client.get("/api/reports", headers={"X-API-Key": "k2"}),
    ]
    assert [a.status_code for a in api] == [200, 429, 200, 429, 200]
    assert api[0].headers["X-RateLimit-Limit"] == "1"  # the closest of the three layers
    assert api[2].headers["X-RateLimit-Limit"] == "3"
    assert [client.get("/api/health").status_code for _ in range(3)] == [200] * 3
    rest = [client.get("/nowhere").status_code for _ in range(94)]
    assert rest == [404] * 92 + [429] * 2  # the app's 100 a minute (8 counted), 404s too


def test_django_settings(load: types.FunctionType) -> None:
    from django.http import HttpRequest, JsonResponse
    from django.test import Client, override_settings
    from django.urls import include, path

    import tests.web.django_site  # noqa: F401  (Django's settings, with a user from X-User)

    settings = load("django-settings")

    def view(request: HttpRequest, **path: str) -> JsonResponse:
        return JsonResponse({"path": request.path})

    urls = types.ModuleType("docs_web_django_settings_urls")
    api = [path("orders", view, name="orders"), path("reports", view, name="reports")]
    urls.urlpatterns = [  # type: ignore[attr-defined]
        path("api/", include((api, "api"))),
        path("login", view, name="login"),
        path("search/<str:term>", view),
        path("health", view),
    ]
    middleware = ["tests.web.django_site.HeaderUser", *settings.MIDDLEWARE[1:]]
    with override_settings(
        ROOT_URLCONF=urls, MIDDLEWARE=middleware, RATEKEEPER=settings.RATEKEEPER
    ):
        client = Client(headers={"X-API-Key": "k1"})
        api_paths = ["/api/orders", "/api/reports", "/api/orders", "/api/reports"]
        assert [client.get(p).status_code for p in api_paths] == [200, 200, 200, 429]
        logins = [client.post("/login", {"username": "bob"}) for _ in range(6)]
        assert [a.status_code for a in logins] == [200] * 5 + [429]
        assert logins[0]["RateLimit-Policy"] == '"default";q=5'  # ietf=True
        searches = [client.get(f"/search/{n}").status_code for n in range(31)]
        assert searches == [200] * 30 + [429]
        assert [client.get("/health").status_code for _ in range(3)] == [200] * 3
        rest = [client.get("/nowhere").status_code for _ in range(61)]
        assert rest == [404] * 59 + [429] * 2  # the app's 100 a minute: 41 counted, /health not


def test_rules(load: types.FunctionType) -> None:
    module = load("rules")

    async def steps(client: httpx.AsyncClient) -> list[int]:
        statuses = [(await client.post("/login")).status_code for _ in range(6)]
        statuses.append((await client.get("/home")).status_code)
        await module.engine.close()
        return statuses

    assert run(module.app, steps, peer="198.51.100.1") == [200] * 5 + [429, 200]
