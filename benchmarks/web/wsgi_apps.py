"""The WSGI groups of the web benchmarks: Flask (middleware and decorator) and Django
(decorator, report only)."""

import types
from collections.abc import Callable
from typing import Any

from benchmarks.web.groups import TINY, Comparison, Contender, Group, join_timer


def flask_group() -> Group:
    import flask
    from flask_limiter import Limiter as FlaskLimiter
    from flask_limiter.util import get_remote_address

    from ratekeeper import Limiter
    from ratekeeper.web import RateLimit
    from ratekeeper.web.flask import RateLimiter
    from ratekeeper.web.wsgi import RateLimitMiddleware

    def app_with(decorate: Callable[[Any], Any] | None = None) -> flask.Flask:
        app = flask.Flask("bench")

        def item() -> str:
            return "ok"

        app.add_url_rule("/item", "item", decorate(item) if decorate else item)
        return app

    def bare(limit: str | None) -> flask.Flask:
        return app_with()

    def middleware(limit: str | None) -> flask.Flask:
        app = app_with()
        app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, Limiter(), [RateLimit(str(limit))]
        )
        return app

    def decorator(limit: str | None) -> flask.Flask:
        return app_with(RateLimiter(Limiter()).limit(RateLimit(str(limit))))

    def failing_with(limit: str | None, decorate: Callable[[Any], Any]) -> flask.Flask:
        """A view charged by outcome: in the sanity pass (``TINY``) it fails, 401, so that
        every attempt is charged and the third refused; timed, it succeeds, so that every
        request is counted and given back (or, for Flask-Limiter, tested and not counted)."""
        app = flask.Flask("bench")
        status = 401 if limit == TINY else 200

        def item() -> tuple[str, int]:
            return "ok", status

        app.add_url_rule("/item", "item", decorate(item))
        return app

    def charged(limit: str | None) -> flask.Flask:
        rate_limit = RateLimit(str(limit), charge_statuses={401})
        return failing_with(limit, RateLimiter(Limiter()).limit(rate_limit))

    def blueprint(limit: str | None) -> flask.Flask:
        app = flask.Flask("bench")
        views = flask.Blueprint("views", "bench")
        views.add_url_rule("/item", "item", lambda: "ok")
        RateLimiter(Limiter()).limit_views(views, RateLimit(str(limit)))
        app.register_blueprint(views)
        return app

    def flask_limiter_deduct_when(limit: str | None) -> flask.Flask:
        limiter = FlaskLimiter(get_remote_address, headers_enabled=True, storage_uri="memory://")
        failed = lambda response: response.status_code == 401  # noqa: E731
        app = failing_with(limit, limiter.limit(str(limit), deduct_when=failed))
        limiter.init_app(app)
        app.extensions["bench"] = limiter
        return app

    def flask_limiter_blueprint(limit: str | None) -> flask.Flask:
        limiter = FlaskLimiter(get_remote_address, headers_enabled=True, storage_uri="memory://")
        app = flask.Flask("bench")
        views = flask.Blueprint("views", "bench")
        views.add_url_rule("/item", "item", lambda: "ok")
        limiter.limit(str(limit))(views)
        app.register_blueprint(views)
        limiter.init_app(app)
        app.extensions["bench"] = limiter
        return app

    def flask_limiter_default(limit: str | None) -> flask.Flask:
        app = app_with()
        app.extensions["bench"] = FlaskLimiter(
            get_remote_address,
            app=app,
            default_limits=[str(limit)],
            headers_enabled=True,
            storage_uri="memory://",
        )
        return app

    def flask_limiter_decorator(limit: str | None) -> flask.Flask:
        limiter = FlaskLimiter(get_remote_address, headers_enabled=True, storage_uri="memory://")
        app = app_with(limiter.limit(str(limit)))
        limiter.init_app(app)
        app.extensions["bench"] = limiter
        return app

    def settle(app: Any) -> None:
        join_timer(app.extensions["bench"].storage)

    return Group(
        "WSGI middleware and per-route limit (Flask)",
        "wsgi",
        Contender("bare Flask", bare, "one view returning `'ok'`"),
        (
            Contender(
                "ratekeeper RateLimitMiddleware",
                middleware,
                "`app.wsgi_app = RateLimitMiddleware(app.wsgi_app, Limiter(), [RateLimit(...)])`",
            ),
            Contender(
                "ratekeeper @limiter.limit",
                decorator,
                "`RateLimiter(Limiter()).limit(RateLimit(...))` on the view",
            ),
            Contender(
                "ratekeeper @limiter.limit, charged by outcome",
                charged,
                "`RateLimit(..., charge_statuses={401})` on the view: counted before it runs, "
                "given back after its 200",
                admitted=401,
            ),
            Contender(
                "ratekeeper limit_views",
                blueprint,
                "`RateLimiter(Limiter()).limit_views(blueprint, RateLimit(...))`",
            ),
            Contender(
                "Flask-Limiter default_limits",
                flask_limiter_default,
                '`Limiter(get_remote_address, app=app, default_limits=[...], headers_enabled=True, storage_uri="memory://")`',
                peer=True,
                settle=settle,
            ),
            Contender(
                "Flask-Limiter @limiter.limit",
                flask_limiter_decorator,
                "the same limiter without default limits, `@limiter.limit(...)` on the view",
                peer=True,
                settle=settle,
            ),
            Contender(
                "Flask-Limiter deduct_when",
                flask_limiter_deduct_when,
                "`@limiter.limit(..., deduct_when=lambda r: r.status_code == 401)`: tests before, "
                "counts after (not exact when attempts overlap)",
                admitted=401,
                peer=True,
                settle=settle,
            ),
            Contender(
                "Flask-Limiter blueprint limit",
                flask_limiter_blueprint,
                "`limiter.limit(...)(blueprint)`",
                peer=True,
                settle=settle,
            ),
        ),
        (
            Comparison("ratekeeper RateLimitMiddleware", ("Flask-Limiter default_limits",)),
            Comparison("ratekeeper @limiter.limit", ("Flask-Limiter @limiter.limit",)),
            Comparison(
                "ratekeeper @limiter.limit, charged by outcome", ("Flask-Limiter deduct_when",)
            ),
            Comparison("ratekeeper limit_views", ("Flask-Limiter blueprint limit",)),
        ),
    )


def django_group() -> Group:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DEBUG=False,
            SECRET_KEY="ratekeeper-benchmarks",
            ALLOWED_HOSTS=["*"],
            ROOT_URLCONF=__name__,
            MIDDLEWARE=[f"{__name__}.ChooseUrls"],
            INSTALLED_APPS=[],
            DATABASES={},
            USE_TZ=True,
            CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        )
        django.setup()
    from django.core.handlers.wsgi import WSGIHandler
    from django.http import HttpResponse
    from django.urls import path
    from django_ratelimit.decorators import ratelimit

    from ratekeeper import Limiter
    from ratekeeper.web import RateLimit
    from ratekeeper.web.django import RateLimiter
    from ratekeeper.web.wsgi import RateLimitMiddleware

    def item(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    def site(name: str, view: Callable[..., Any]) -> Callable[[dict[str, Any], Any], Any]:
        """A Django application whose one route is ``view``: every contender is the same
        handler, its own URL configuration chosen for each request by ``ChooseUrls``."""
        urls = types.ModuleType(f"bench_urls_{name}")
        urls.urlpatterns = [path("item", view)]  # type: ignore[attr-defined]
        handler = WSGIHandler()

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            environ["bench.urlconf"] = urls
            return handler(environ, start_response)

        return app

    def bare(limit: str | None) -> Any:
        return site("bare", item)

    def decorator(limit: str | None) -> Any:
        return site("ratekeeper", RateLimiter(Limiter()).limit(RateLimit(str(limit)))(item))

    def middleware(limit: str | None) -> Any:
        return RateLimitMiddleware(site("bare", item), Limiter(), [RateLimit(str(limit))])

    def django_ratelimit(limit: str | None) -> Any:
        from django.core.cache import cache

        cache.clear()
        rate = str(limit).replace("minute", "m")
        return site("ratelimit", ratelimit(key="ip", rate=rate, block=True)(item))

    return Group(
        "Per-route limit (Django), report only",
        "wsgi",
        Contender("bare Django", bare, "one view returning `HttpResponse('ok')`, no middleware"),
        (
            Contender(
                "ratekeeper @limiter.limit",
                decorator,
                "`RateLimiter(Limiter()).limit(RateLimit(...))` on the view",
            ),
            Contender(
                "ratekeeper RateLimitMiddleware",
                middleware,
                "the Django WSGI application wrapped in `ratekeeper.web.wsgi.RateLimitMiddleware`",
            ),
            Contender(
                "django-ratelimit @ratelimit",
                django_ratelimit,
                '`@ratelimit(key="ip", rate="1000000/m", block=True)` over a `LocMemCache`; '
                "it sends no rate-limit headers (ratekeeper does) and refuses with 403",
                refused=403,
                peer=True,
                headers=False,
            ),
        ),
        (Comparison("ratekeeper @limiter.limit", ("django-ratelimit @ratelimit",), target=None),),
    )


class ChooseUrls:
    """Django middleware of the benchmark's site: the URL configuration the environ names."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        request.urlconf = request.META["bench.urlconf"]
        return self.get_response(request)


#: An empty URL configuration: Django's default, every request choosing its own.
urlpatterns: list[Any] = []
