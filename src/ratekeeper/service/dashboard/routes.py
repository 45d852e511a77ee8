"""The dashboard's routes: the page, and its figures as JSON.

- ``GET /dashboard``: the page (``page.html``, ``dashboard.css`` and ``dashboard.js`` beside
  this module, served under ``/dashboard/assets/``). It asks ``GET /v1/stats`` once a second.
- ``GET /v1/stats``: everything the page shows (``ratekeeper.service.dashboard.stats``);
  ``GET /v1/top?window=60&n=10``: the keys with the most decisions and refusals.

Keys are often personal data (user names, addresses), so all of it is behind the admin token.
A script sends ``Authorization: Bearer <token>``. A browser signs in once: ``/dashboard``
without credentials answers 401 with a form whose token, posted to ``/dashboard/login``, is
checked and answered with a cookie (``HttpOnly``, ``SameSite=Strict``; ``Secure`` over
HTTPS) that holds an HMAC of the token, never the token. ``/dashboard?token=<token>`` signs in
the same way (the address ``ratekeeper serve`` prints), and redirects to the bare
``/dashboard``. Changing the token signs every browser out. The page is served with a
``Content-Security-Policy`` that allows only its own files.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import logging
import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ratekeeper.core.version import VERSION
from ratekeeper.service.dashboard import stats
from ratekeeper.service.dashboard.recorder import Recorder, Shot
from ratekeeper.service.dashboard.shared import SharedShots
from ratekeeper.service.http.admin import listing
from ratekeeper.service.http.health import READY_TIMEOUT, config_error, stamp
from ratekeeper.service.http.reading import read_body
from ratekeeper.service.http.responses import answering, json_response
from ratekeeper.wire.problems import Problem

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine
    from ratekeeper.rules import RuleSet
    from ratekeeper.service.observe.metrics import Metrics

log = logging.getLogger("ratekeeper.service")

#: The cookie of a signed-in browser, and how long it lasts (seconds).
COOKIE, COOKIE_AGE = "ratekeeper_dashboard", 12 * 3600
#: The page's files, by the name it asks for, and their content types.
ASSETS = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
}
#: The overrides the page lists.
SHOWN_OVERRIDES = 100
#: The most a sign-in form may weigh (bytes).
MAX_FORM = 4096

_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_SIGN_IN_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
)
_PRIVATE = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class Dashboard:
    """The dashboard of the service over ``engine``: its routes' handlers, open to
    ``admin_token``, and ``run()``, the task that ticks ``recorder`` every second (and, with
    ``shared``, publishes this worker's record for the others)."""

    def __init__(
        self,
        engine: AsyncEngine,
        metrics: Metrics,
        recorder: Recorder,
        admin_token: str,
        *,
        shared: SharedShots | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not admin_token:
            raise ValueError("the dashboard needs an admin token: it shows the clients' keys")
        self.engine = engine
        self.metrics = metrics
        self.recorder = recorder
        self.shared = shared
        self._token = admin_token.encode()
        self._session = hmac.new(self._token, b"ratekeeper dashboard", hashlib.sha256).hexdigest()
        self._clock = clock
        self._drawn: tuple[RuleSet, list[dict[str, Any]]] | None = None  # the rules, drawn

    def routes(self) -> list[BaseRoute]:
        """The dashboard's routes, for the service's HTTP app to serve beside its own: each
        handler's errors answered as problems, as the app answers its own routes'."""
        return [
            Route(path, answering(handler), methods=[method])
            for path, handler, method in (
                ("/dashboard", self.page, "GET"),
                ("/dashboard/login", self.login, "POST"),
                ("/dashboard/logout", self.logout, "POST"),
                ("/dashboard/assets/{name}", self.asset, "GET"),
                ("/v1/stats", self.stats, "GET"),
                ("/v1/top", self.top, "GET"),
            )
        ]

    # Who may look.

    def _signed_in(self, request: Request) -> bool:
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() == "bearer" and self._is_token(token.strip()):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self._session.encode())

    def _is_token(self, text: str) -> bool:
        return hmac.compare_digest(text.encode(), self._token)

    def _authorize(self, request: Request) -> None:
        if not self._signed_in(request):
            raise Problem.of(
                "unauthorized", "the admin token is required", "/headers/authorization"
            )

    def _enter(self, request: Request) -> Response:
        """Signed in: to the bare page, with the cookie."""
        answer = RedirectResponse("/dashboard", status_code=303, headers=_PRIVATE)
        answer.set_cookie(
            COOKIE,
            self._session,
            max_age=COOKIE_AGE,
            path="/",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return answer

    async def page(self, request: Request) -> Response:
        """``GET /dashboard``: the page; without credentials, the sign-in form (401)."""
        token = request.query_params.get("token")
        if token is not None:
            if self._is_token(token):
                return self._enter(request)
            return _sign_in(wrong=True)
        if not self._signed_in(request):
            return _sign_in()
        return Response(_read("page.html"), headers=_headers("text/html; charset=utf-8"))

    async def login(self, request: Request) -> Response:
        """``POST /dashboard/login``: the form's token (``token=``, form-encoded)."""
        body = await read_body(request, MAX_FORM)
        fields = parse_qs(body.decode("utf-8", "replace"))  # at most MAX_FORM bytes
        given = fields.get("token", [""])[0].strip()
        if given and self._is_token(given):
            return self._enter(request)
        return _sign_in(wrong=True)

    async def logout(self, request: Request) -> Response:
        """``POST /dashboard/logout``: the cookie forgotten."""
        answer = RedirectResponse("/dashboard", status_code=303, headers=_PRIVATE)
        answer.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return answer

    async def asset(self, request: Request) -> Response:
        """``GET /dashboard/assets/{name}``: one of the page's files."""
        self._authorize(request)
        name = request.path_params["name"]
        kind = ASSETS.get(name)
        if kind is None:
            raise Problem.of("not-found", f"the dashboard has no file {name!r}")
        return Response(_read(name), headers=_headers(kind))

    # What it shows.

    async def stats(self, request: Request) -> Response:
        """``GET /v1/stats``."""
        self._authorize(request)
        now = self._clock()
        shots = await self._shots(now)
        engine = self.engine
        series, rules = stats.series(shots, now, engine.rules)
        body: dict[str, Any] = {
            "version": VERSION,
            "now": now,
            "started": stats.started(shots),
            "workers": sum(1 for shot in shots if shot.live),
            "series": series,
            "rules": rules,
            "latency": stats.latency(shots, now),
            "store": stats.store(shots, sum(series["degraded"][-61:-1])),
            "config": None,
            "reload": self._reload(),
            "tree": self._tree(),
            "overrides": await self._overrides(),
            "top": stats.top(shots, now, 60, 10, self.recorder.capacity),
        }
        if engine.config is not None:
            problem = await config_error(engine.config)
            body["config"] = {"ok": problem is None, "error": problem}
        return json_response(body, headers={"Cache-Control": "no-store"})

    async def top(self, request: Request) -> Response:
        """``GET /v1/top?window=60&n=10``."""
        self._authorize(request)
        window = _whole(request, "window", 60, stats.MIN_WINDOW, stats.MAX_WINDOW)
        n = _whole(request, "n", 10, 1, stats.MAX_KEYS)
        now = self._clock()
        shots = await self._shots(now)
        body = stats.top(shots, now, window, n, self.recorder.capacity)
        return json_response(body, headers={"Cache-Control": "no-store"})

    async def _shots(self, now: float) -> list[Shot]:
        """The record of every worker: this one's as it is now, the others' as they wrote it."""
        await self.metrics.refresh()
        own = self.recorder.shot(now)
        own.health = _health(self.metrics)
        if self.shared is None:
            return [own]
        others = await asyncio.to_thread(self.shared.others, own.pid)
        return [own, *others]

    def _tree(self) -> list[dict[str, Any]]:
        """The rules as a tree, made again only when they were reloaded."""
        rules = self.engine.rules
        if self._drawn is None or self._drawn[0] is not rules:
            self._drawn = (rules, stats.tree(rules))
        return self._drawn[1]

    def _reload(self) -> dict[str, Any]:
        watcher = self.engine.watcher
        return {
            "sources": list(self.engine.rules.sources),
            "reloads": watcher.reloads,
            "errors": watcher.errors,
            "last_reload_at": _stamp(watcher.last_reload_at),
            "last_error": watcher.last_error,
            "last_error_at": _stamp(watcher.last_error_at),
        }

    async def _overrides(self) -> dict[str, Any]:
        config = self.engine.config
        if config is None:
            return {"items": [], "truncated": False, "error": None}
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                found, truncated = await asyncio.to_thread(
                    listing, config, None, "", SHOWN_OVERRIDES
                )
        except TimeoutError:
            return {
                "items": [],
                "truncated": False,
                "error": f"no answer within {READY_TIMEOUT:g} s",
            }
        except Exception as error:  # shown on the page, whatever it is
            return {"items": [], "truncated": False, "error": str(error) or type(error).__name__}
        return {"items": found, "truncated": truncated, "error": None}

    # Every second.

    async def run(self) -> None:
        """Tick the recorder just after every second turns, and publish this worker's record
        when the workers share one; until cancelled. A failure is logged once, as it starts."""
        failing = False
        while True:
            now = self._clock()
            await asyncio.sleep(1.0 - now % 1.0 + 0.005)
            try:
                self.recorder.tick()
                if self.shared is not None:
                    shot = self.recorder.shot()
                    shot.health = _health(self.metrics)
                    await asyncio.to_thread(self.shared.publish, shot)
            except Exception:
                if not failing:
                    log.exception("the dashboard could not record this second; trying every second")
                failing = True
            else:
                if failing:
                    log.info("the dashboard records again")
                failing = False


def _whole(request: Request, name: str, default: int, least: int, most: int) -> int:
    """The query parameter ``name``: a whole number from ``least`` to ``most``."""
    given = request.query_params.get(name)
    if given is None:
        return default
    if not (given.isascii() and given.isdigit() and least <= int(given) <= most):
        raise Problem.of(
            "invalid", f"{name} must be a whole number from {least} to {most}", f"/query/{name}"
        )
    return int(given)


def _health(metrics: Metrics) -> dict[str, Any] | None:
    health = metrics.health()
    if health is None:
        return None
    return {
        "ok": health.ok,
        "breaker": health.breaker,
        "error": health.error,
        "open_shards": list(health.open_shards),
        "last_error": health.last_error,
        "last_error_at": health.last_error_at,
    }


def _stamp(at: float | None) -> str | None:
    return None if at is None else stamp(at)


def _headers(kind: str) -> dict[str, str]:
    return {"Content-Type": kind, "Content-Security-Policy": _POLICY, **_PRIVATE}


def _read(name: str) -> bytes:
    return resources.files("ratekeeper.service.dashboard").joinpath(name).read_bytes()


def _sign_in(*, wrong: bool = False) -> Response:
    """The sign-in form, answered 401."""
    said = "<p class=wrong>That is not the admin token.</p>" if wrong else ""
    page = _SIGN_IN.replace("{said}", said).replace("{version}", html.escape(VERSION))
    headers = {
        "Content-Security-Policy": _SIGN_IN_POLICY,
        "WWW-Authenticate": 'Bearer realm="ratekeeper"',
        **_PRIVATE,
    }
    return Response(page, 401, headers=headers, media_type="text/html")


_SIGN_IN = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ratekeeper dashboard: sign in</title>
<style>
body{font:16px/1.5 system-ui,sans-serif;background:#f4f5f7;color:#1d2330;margin:0;
display:flex;min-height:100vh;align-items:center;justify-content:center}
form{background:#fff;padding:2rem;border-radius:8px;box-shadow:0 1px 4px #0002;
width:min(22rem,90vw)}
h1{font-size:1.2rem;margin:0 0 1rem}label{display:block;margin-bottom:.3rem}
input{width:100%;box-sizing:border-box;padding:.5rem;font:inherit;border:1px solid #aab;
border-radius:4px}
button{margin-top:1rem;padding:.5rem 1.2rem;font:inherit;border:0;border-radius:4px;
background:#2457c5;color:#fff}
.wrong{color:#b3261e}small{color:#667}
</style></head><body>
<form method="post" action="/dashboard/login">
<h1>ratekeeper dashboard</h1>{said}
<label for="token">Admin token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Sign in</button>
<p><small>The token is the service's <code>--admin-token</code>. ratekeeper {version}</small></p>
</form></body></html>
"""
