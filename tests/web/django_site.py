"""A small Django site for the tests: settings, a middleware that logs a user in from a header
(in place of django.contrib.auth, which needs a database), and views limited per route."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import django
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="ratekeeper-tests",
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        MIDDLEWARE=[f"{__name__}.HeaderUser"],
        INSTALLED_APPS=[],
        DATABASES={},
        USE_TZ=True,
    )
    django.setup()

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path

from ratekeeper import Limit, Limiter, MemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit, keys
from ratekeeper.web.django import RateLimiter

clock = FakeClock()
store = MemoryStore(clock=clock)
limiter = RateLimiter(Limiter(store))


class HeaderUser:
    """Sets ``request.user`` from ``X-User``: authenticated with that primary key, or not."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        name = request.headers.get("X-User")
        request.user = SimpleNamespace(is_authenticated=bool(name), pk=name)  # type: ignore[assignment]
        return self.get_response(request)


MONTH = Limit(3, 30 * 86_400, "sliding_log")
stories = RateLimit(MONTH, key=keys.user(), scope="premium-stories")


@limiter.limit(stories)
def story(request: HttpRequest, slug: str) -> HttpResponse:
    return JsonResponse({"story": slug})


@limiter.limit(stories)
def video(request: HttpRequest, slug: str) -> HttpResponse:
    return JsonResponse({"video": slug})


@limiter.limit(RateLimit(Limit(2, 60, "sliding_log"), key=keys.route() + keys.client_ip()))
def item(request: HttpRequest, number: int) -> HttpResponse:
    return HttpResponse(f"item {number}")


@limiter.limit(
    RateLimit(Limit(2, 900, "sliding_log"), key=keys.field("username"), scope="login-user"),
    RateLimit(Limit(3, 900, "sliding_log"), scope="login-ip"),
)
def login(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"welcome": request.POST["username"]})


urlpatterns: list[Any] = [
    path("stories/<slug:slug>", story),
    path("videos/<slug:slug>", video),
    path("items/<int:number>", item),
    path("login", login),
]
