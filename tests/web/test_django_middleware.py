"""Limits from Django's settings (``RateLimitMiddleware`` and ``settings.RATEKEEPER``): on every
request, on a URL namespace, a URL name and a path pattern; and per-view limits on ``async
def`` views."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client, override_settings
from django.urls import include, path

import tests.web.django_site  # noqa: F401  (Django's settings, with a user from X-User)
from ratekeeper import AsyncLimiter, Limit, Limiter, MemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit, keys
from ratekeeper.web.django import RateLimiter, RateLimitMiddleware

clock = FakeClock(1_700_000_000.0)
store = MemoryStore(clock=clock)
limiter = Limiter(store)
per_view = RateLimiter(limiter)
MIDDLEWARE = ["tests.web.django_site.HeaderUser", "ratekeeper.web.django.RateLimitMiddleware"]


def minute(amount: int) -> Limit:
    return Limit(amount, 60, "sliding_log")


def named(name: str) -> Any:
    def view(request: HttpRequest, **path: str) -> HttpResponse:
        return JsonResponse({"view": name, **path})

    return view


@per_view.limit(RateLimit(minute(1)))
def own(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"view": "own"})


@per_view.limit(RateLimit(minute(10)))
def roomy(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"view": "roomy"})


@per_view.limit(RateLimit(minute(2), key=keys.client_ip() + keys.route()))
async def reading(request: HttpRequest, number: int) -> HttpResponse:
    await asyncio.sleep(0)
    return JsonResponse({"reading": number})


api = [
    path("a", named("a"), name="a"),
    path("b", named("b"), name="b"),
    path("own", own, name="own"),
    path("roomy", roomy, name="roomy"),
    path("health", named("health"), name="health"),
]


def sign_in(request: HttpRequest, password: str) -> HttpResponse:
    return JsonResponse({"ok": password == "right"}, status=200 if password == "right" else 401)


urlpatterns: list[Any] = [
    path("api/", include((api, "api"))),
    path("sign-in/<str:password>", sign_in, name="sign-in"),
    path("login", named("login"), name="login"),
    path("search/<str:term>", named("search")),
    path("outside", named("outside")),
    path("readings/<int:number>", reading),
]


def configured(**config: Any) -> Any:
    return override_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=MIDDLEWARE,
        RATEKEEPER={"DECIDER": limiter, **config},
    )


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    store.clear()
    yield


def get(paths: list[str], **headers: str) -> list[Any]:
    client = Client(headers=headers)
    return [client.get(p) for p in paths]


def test_a_namespace_counts_its_urls_together_and_no_other() -> None:
    with configured(ROUTES={"api:*": [RateLimit(minute(3))]}, EXEMPT=["/api/health"]):
        paths = ["/api/a", "/api/b", "/outside", "/api/a", "/api/b", "/api/a", "/outside"]
        paths += ["/api/health"]
        answers = get(paths)
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 429, 429, 200, 200]
    assert answers[0].json() == {"view": "a"}
    assert answers[1].json() == {"view": "b"}
    assert [a.get("X-RateLimit-Remaining") for a in answers[:4]] == ["2", "1", None, "0"]
    refused = answers[4]
    assert refused["Content-Type"] == "application/problem+json"
    assert refused["Retry-After"] == "60"
    assert refused["X-RateLimit-Limit"] == "3"
    assert refused.json()["type"] == "urn:ratekeeper:problem:rate-limited"
    assert "X-RateLimit-Limit" not in answers[7]  # exempt


def test_a_url_name_and_a_path_pattern() -> None:
    routes = {"login": [RateLimit(minute(2))], "/search/*": [RateLimit(minute(1))]}
    with configured(ROUTES=routes):
        answers = get(["/login", "/search/x", "/search/y", "/login", "/login", "/api/a"])
    assert [a.status_code for a in answers] == [200, 200, 429, 200, 429, 200]


def test_the_app_the_namespace_and_the_views_own_limits_all_apply_in_that_order() -> None:
    config = {"LIMITS": [RateLimit(minute(5))], "ROUTES": {"api:*": [RateLimit(minute(3))]}}
    with configured(**config):
        answers = get(["/api/own", "/api/own", "/api/a", "/api/b", "/nowhere", "/outside"])
    assert [a.status_code for a in answers] == [200, 429, 200, 429, 404, 429]
    # Admitted: of the app's 5, the namespace's 3 and the view's 1, the view's is closest.
    assert answers[0]["X-RateLimit-Limit"] == "1" and answers[0]["X-RateLimit-Remaining"] == "0"
    assert answers[1]["X-RateLimit-Limit"] == "1"  # the view refused: its own headers
    assert answers[2]["X-RateLimit-Limit"] == "3"  # own, own, a: the namespace's last
    assert answers[2]["X-RateLimit-Remaining"] == "0"
    # /api/b was refused by the namespace after the app's had counted it: the 5th; a URL no
    # view answers counts in the app's too, and the app's limit refuses the 6th.
    assert answers[3]["X-RateLimit-Limit"] == "3"
    assert answers[5]["X-RateLimit-Limit"] == "5"


def test_an_admitted_view_tells_of_the_namespace_limit_when_it_is_the_closer() -> None:
    with configured(ROUTES={"api:*": [RateLimit(minute(3))]}):
        answers = get(["/api/a", "/api/roomy", "/api/roomy"])
    assert [a.status_code for a in answers] == [200, 200, 200]
    # The namespace's 3 (none left) is closer than the view's 10 (8 left).
    assert answers[2]["X-RateLimit-Limit"] == "3"
    assert answers[2]["X-RateLimit-Remaining"] == "0"
    assert answers[1]["X-RateLimit-Remaining"] == "1"


def test_methods_and_shadow_are_honoured(caplog: pytest.LogCaptureFixture) -> None:
    routes = {
        "api:*": [RateLimit(minute(1), methods=["POST"])],
        "login": [RateLimit(minute(1), shadow=True)],
    }
    with configured(ROUTES=routes), caplog.at_level(logging.INFO, logger="ratekeeper.web"):
        client = Client()
        gets = [client.get("/api/a").status_code for _ in range(3)]
        posts = [client.post("/api/b").status_code for _ in range(2)]
        logins = [client.get("/login") for _ in range(3)]
    assert gets == [200, 200, 200]
    assert posts == [200, 429]
    assert [a.status_code for a in logins] == [200, 200, 200]
    assert "X-RateLimit-Limit" not in logins[2]
    assert len([r for r in caplog.records if "shadow mode" in r.getMessage()]) == 2


def test_a_limit_by_user_and_a_decider_by_dotted_path() -> None:
    routes = {"api:*": [RateLimit(minute(2), key=keys.user())]}
    dotted = {"DECIDER": f"{__name__}.limiter", "ROUTES": routes}
    with override_settings(ROOT_URLCONF=__name__, MIDDLEWARE=MIDDLEWARE, RATEKEEPER=dotted):
        alice = get(["/api/a", "/api/b", "/api/a"], X_User="alice")
        bob = get(["/api/a"], X_User="bob")
        anonymous = get(["/api/a"] * 3)
    assert [a.status_code for a in alice] == [200, 200, 429]
    assert [a.status_code for a in bob] == [200]
    assert [a.status_code for a in anonymous] == [200] * 3  # no user key: not counted


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "RATEKEEPER is a dict"),
        ({"LIMITS": []}, "needs a DECIDER"),
        ({"DECIDER": limiter, "LIMIT": []}, "unknown key 'LIMIT'"),
        ({"DECIDER": "tests.nowhere.limiter"}, "settings.RATEKEEPER: .*nowhere"),
        ({"DECIDER": AsyncLimiter()}, "asyncio"),
        ({"DECIDER": limiter, "OPTIONS": {"max_body": -1}}, "max_body"),
        ({"DECIDER": limiter, "OPTIONS": {"colour": 1}}, "colour"),
        ({"DECIDER": limiter, "LIMITS": ["100/minute"]}, r"\['LIMITS'\]: .*RateLimit"),
        ({"DECIDER": limiter, "ROUTES": []}, "ROUTES'\\] is a dict"),
        ({"DECIDER": limiter, "ROUTES": {"api:*": RateLimit("1/minute")}}, "'api:\\*'"),
        ({"DECIDER": limiter, "ROUTES": {"": [RateLimit("1/minute")]}}, "URL pattern"),
        ({"DECIDER": limiter, "ROUTES": {"api:*": []}}, "at least one"),
        ({"DECIDER": limiter, "EXEMPT": ["health"]}, "starts with '/'"),
    ],
)
def test_bad_settings_are_improperly_configured(config: Any, message: str) -> None:
    with override_settings(RATEKEEPER=config), pytest.raises(ImproperlyConfigured, match=message):
        RateLimitMiddleware(lambda request: HttpResponse())


def test_an_async_view_is_limited_like_a_sync_one() -> None:
    with override_settings(ROOT_URLCONF=__name__):
        here = Client(REMOTE_ADDR="198.51.100.1")
        answers = [here.get(f"/readings/{n}") for n in range(3)]
        there = Client(REMOTE_ADDR="198.51.100.2").get("/readings/7")
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[0].json() == {"reading": 0}
    assert answers[0]["X-RateLimit-Remaining"] == "1"
    assert answers[2]["Retry-After"] == "60"
    assert answers[2]["Content-Type"] == "application/problem+json"
    assert there.status_code == 200


def test_an_async_view_through_the_async_client() -> None:
    from django.test import AsyncClient

    async def readings() -> list[int]:
        client = AsyncClient(REMOTE_ADDR="198.51.100.3")
        return [(await client.get(f"/readings/{n}")).status_code for n in range(3)]

    with configured(LIMITS=[RateLimit(minute(5))]):
        assert asyncio.run(readings()) == [200, 200, 429]


def test_settings_limits_charged_by_outcome_count_only_failures() -> None:
    """The app's and a URL name's limits, both charging 401s only: a correct password is
    given back by the middleware after the view, every time; wrong ones count, and past the
    URL's 3 the 4th is refused, after which the app's limit has counted only the 401s."""
    config = {
        "LIMITS": [RateLimit(minute(5), charge_statuses={401})],
        "ROUTES": {"sign-in": [RateLimit(minute(3), charge_statuses={401})]},
    }
    with configured(**config):
        answers = get(["/sign-in/right"] * 12 + ["/sign-in/wrong"] * 4 + ["/sign-in/right"])
        statuses = [answer.status_code for answer in answers]
        assert statuses == [200] * 12 + [401, 401, 401, 429, 429]
    # The app's 5 counted the three 401s only (the 200s and the 429s were given back).
    assert limiter.peek("scope:app|remote_address:127.0.0.1", minute(5)).remaining == 2
