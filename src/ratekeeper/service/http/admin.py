"""The HTTP surface's admin endpoints: ``POST /v1/reset`` and the configuration store's
per-key overrides (``GET|PUT|DELETE /v1/overrides/{key}``, ``GET /v1/overrides``).

All are behind ``Authorization: Bearer <admin_token>``: without it they answer 401 (with
``WWW-Authenticate``), and with no token set they answer 404, as if they were not there. The
overrides need a configuration store (503 without one); the store's calls run in a thread.
"""

from __future__ import annotations

import asyncio
import hmac
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from ratekeeper.core.errors import ConfigError
from ratekeeper.core.overrides import Override
from ratekeeper.service.http import bodies
from ratekeeper.service.http.reading import read_json
from ratekeeper.service.http.responses import json_response, problem_response
from ratekeeper.wire.problems import Problem

if TYPE_CHECKING:
    from ratekeeper.config import ConfigStore
    from ratekeeper.engine import AsyncEngine

#: The most overrides one listing returns.
MAX_LISTING = 1000


class Admin:
    """The admin routes' handlers over one engine, open to ``admin_token`` (None: off)."""

    def __init__(self, engine: AsyncEngine, *, admin_token: str | None = None) -> None:
        self.engine = engine
        self.admin_token = admin_token

    def _authorize(self, request: Request) -> None:
        """Nothing when ``request`` carries the admin token; else a 404 problem (no token is
        set: the admin endpoints are off) or a 401 (compared in constant time)."""
        if self.admin_token is None:
            raise Problem.of("not-found", "the admin endpoints are off: no admin token is set")
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.admin_token.encode()
        ):
            raise Problem.of("unauthorized", "a bearer token is required", "/headers/authorization")

    def _config(self, request: Request) -> ConfigStore:
        self._authorize(request)
        config = self.engine.config
        if config is None:
            raise Problem.of("unavailable", "the service has no configuration store")
        return config

    async def reset(self, request: Request) -> Response:
        """``POST /v1/reset``: forget a key's count (204); admin, as it gives the limit back."""
        try:
            self._authorize(request)
        except Problem as problem:
            return _refused(problem)
        given = bodies.key_of(await read_json(request))
        await self.engine.reset(given.key, given.limit)
        return Response(status_code=204)

    async def override(self, request: Request) -> Response:
        """``GET|PUT|DELETE /v1/overrides/{key}``."""
        try:
            config = self._config(request)
        except Problem as problem:
            return _refused(problem)
        key = request.path_params["key"]
        domain = request.query_params.get("domain", "")
        if request.method == "GET":
            found = await asyncio.to_thread(config.get, key, domain)
            if found is None:
                raise Problem.of("not-found", f"no override for {key!r} in domain {domain!r}")
            return json_response({"domain": domain, "key": key, "override": found.to_dict()})
        if request.method == "DELETE":
            if not await asyncio.to_thread(config.delete, key, domain):
                raise Problem.of("not-found", f"no override for {key!r} in domain {domain!r}")
            return Response(status_code=204)
        data = await read_json(request)
        try:
            override = Override.from_dict(data) if isinstance(data, dict) else None
        except ConfigError as error:
            raise bodies.invalid(str(error)) from None
        if override is None:
            raise bodies.invalid("an override is a JSON object of capacity and time_window_sec")
        await asyncio.to_thread(config.set, key, override, domain)
        return json_response({"domain": domain, "key": key, "override": override.to_dict()})

    async def overrides(self, request: Request) -> Response:
        """``GET /v1/overrides?domain=&prefix=``: at most ``MAX_LISTING``, by domain then key."""
        try:
            config = self._config(request)
        except Problem as problem:
            return _refused(problem)
        domain = request.query_params.get("domain")
        prefix = request.query_params.get("prefix", "")
        found, truncated = await asyncio.to_thread(listing, config, domain, prefix, MAX_LISTING)
        return json_response({"overrides": found, "truncated": truncated})


def listing(
    config: ConfigStore, domain: str | None, prefix: str, most: int
) -> tuple[list[dict[str, Any]], bool]:
    """At most ``most`` of the overrides of ``domain`` (None: every domain) whose key starts
    with ``prefix``, by domain then key, and whether there were more (calls the store)."""
    found: list[dict[str, Any]] = []
    for one_domain, key, override in config.items(domain, prefix):
        if len(found) == most:
            return found, True
        found.append({"domain": one_domain, "key": key, "override": override.to_dict()})
    return found, False


def _refused(problem: Problem) -> Response:
    """The answer to a request the admin endpoints refuse: a 401 asks for the bearer token."""
    headers = {"WWW-Authenticate": 'Bearer realm="ratekeeper"'} if problem.status == 401 else None
    return problem_response(problem, headers)
