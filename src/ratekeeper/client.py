"""``RemoteLimiter`` and ``AsyncRemoteLimiter``: the ``Limiter`` API, decided by a ratekeeper
service (``ratekeeper serve``) over HTTP.

They are a ``Limiter`` and an ``AsyncLimiter`` over a request store that asks the service:
``ServiceStore`` and its asyncio twin POST each hit to ``/v1/check`` (a key with its limit) on
keep-alive connections (httpx), with a ``timeout`` per call. When the service cannot be reached
(refused, timed out, or answering 5xx), the same ``on_store_error`` policy as for a Redis store
answers (``allow``, ``deny``, ``local``, or ``None`` to raise ``StoreError``), with the same
circuit breaker. Keys and costs are checked here first; a value the service refuses raises
``InvalidInputError``; a refused admin token or a wrong address (a URL without a host, a
server that is not a ratekeeper service) raises ``StoreConfigError``.

The service decides on its own clock, by its own store: every client of one service shares its
counts. It takes limits it can name, ``Limit(amount, period, algorithm, burst=, granularity=)``
(no calendar windows or partial grants), and decides several limits at once only one by one
(``hit_many`` without ``all_or_nothing``). ``ServiceStore`` and its twin are the
``ratekeeper[server]`` extra (httpx).
"""

from __future__ import annotations

from math import inf
from typing import Any
from urllib.parse import urlsplit

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import (
    InvalidInputError,
    InvalidLimitError,
    MissingExtraError,
    StoreConfigError,
    StoreError,
)
from ratekeeper.core.inputs import check_cost, check_key
from ratekeeper.core.limits import Limit
from ratekeeper.core.redaction import redacted
from ratekeeper.limiter import AsyncLimiter, Limiter
from ratekeeper.stores.health import Health
from ratekeeper.stores.memory import Hit

#: Seconds each call to the service may take.
DEFAULT_TIMEOUT = 0.25
#: The longest ``timeout``, in seconds (as a Redis store's).
MAX_TIMEOUT = 3600
#: Seconds an idle connection is kept for a next call: well under the 5 s the service keeps
#: one open (uvicorn's keep-alive), so that no call goes out on a connection the service is
#: closing that moment (it would fail, and be answered by ``on_store_error``).
KEEPALIVE_EXPIRY = 2.0


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise MissingExtraError("httpx", "server") from None
    return httpx


def _limits() -> Any:
    """httpx's default pool (100 connections, 20 kept), its idle ones kept for less long."""
    return _httpx().Limits(
        max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_EXPIRY
    )


def limit_body(limit: Limit) -> dict[str, Any]:
    """How ``limit`` is named to the service; ``InvalidLimitError`` for one it cannot name."""
    if limit.calendar or limit.partial or limit.algorithm is Algorithm.CONCURRENCY:
        raise InvalidLimitError(
            f"{limit!r} cannot be sent to a ratekeeper service: calendar windows, partial grants "
            "and concurrency limits are decided in process only"
        )
    if limit.debt:
        raise InvalidLimitError(
            f"{limit!r} cannot be sent to a ratekeeper service: a service counts every hit, "
            "refused or not, for all its limits or for none (ratekeeper serve --debt)"
        )
    body: dict[str, Any] = {
        "capacity": limit.amount,
        "time_window_sec": limit.period,
        "algorithm": limit.algorithm.value,
    }
    if limit.burst is not None:
        body["burst"] = limit.burst
    if limit.algorithm is Algorithm.BUCKETED_WINDOW:
        body["granularity"] = limit.bucket
    return body


def _decision(response: Any, url: str, cost: int) -> Decision:
    """The decision of a check's answer (200 or 429); else the error it stands for."""
    data = _answer(response, url)
    try:
        status = data["statuses"][0]
        allowed, retry = data["allowed"], status["retry_after"]
        if allowed.__class__ is not bool:
            raise TypeError(allowed)
        return Decision(
            allowed,
            status["limit"] or 0,
            status["remaining"],
            status["reset_after"] or 0.0,
            inf if retry is None else retry,
            0.0,
            cost if allowed else 0,
            bool(data.get("degraded", False)),
        )
    except (LookupError, TypeError, AttributeError):
        raise _foreign(response, url) from None


def _answer(response: Any, url: str) -> Any:
    """The JSON of a check's answer (200 or 429); else the error it stands for."""
    status = response.status_code
    if status in (200, 429):
        try:
            return response.json()
        except ValueError:
            raise _foreign(response, url) from None
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        detail = response.text
    if status in (400, 413, 422):
        raise InvalidInputError(f"the ratekeeper service refused the request: {detail}")
    if status in (401, 403, 404, 405):
        raise StoreConfigError(f"ratekeeper service {redacted(url)} answered {status}: {detail}")
    raise StoreError(f"ratekeeper service {redacted(url)} answered {status}: {detail}")


def _foreign(response: Any, url: str) -> StoreConfigError:
    """The error of an answer no ratekeeper service gives (a 200 to a check that is not a
    check's result, a 200 to a reset): a wrong URL."""
    return StoreConfigError(
        f"{redacted(url)} is not a ratekeeper service: it answered {response.status_code} "
        f"with {response.text[:80]!r}"
    )


def _is_http(url: Any) -> bool:
    """Whether ``url`` is an ``http(s)://`` URL naming a host, and a port if any in range."""
    if not isinstance(url, str):
        return False
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - urlsplit checks the port when it is read
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


class _Base:
    """What the twins share: the address, the bodies, the checks (no I/O)."""

    def __init__(self, url: str, timeout: float, admin_token: str | None) -> None:
        if not _is_http(url):
            raise StoreConfigError(
                f"a ratekeeper service URL is http(s)://host:port, "
                f"not {redacted(url) if isinstance(url, str) else url!r}"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise StoreConfigError(f"timeout must be positive seconds, not {timeout!r}")
        if not 0 < timeout < MAX_TIMEOUT:
            raise StoreConfigError(
                f"timeout must be positive seconds under {MAX_TIMEOUT}, not {timeout!r}"
            )
        if admin_token is not None and (not isinstance(admin_token, str) or not admin_token):
            raise StoreConfigError("admin_token is the service's admin token, a non-empty string")
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self._errors = _httpx().HTTPError
        self._admin = {} if admin_token is None else {"Authorization": f"Bearer {admin_token}"}

    def _check(self, key: str, limit: Limit, cost: int, now: float | None) -> dict[str, Any]:
        if now is not None:
            raise ValueError("a ratekeeper service decides on its own clock: now must be None")
        return {"key": check_key(key), "limit": limit_body(limit), "cost": check_cost(cost)}

    @staticmethod
    def _one_by_one(hits: list[Hit], all_or_nothing: bool) -> None:
        if all_or_nothing and len(hits) > 1:
            raise InvalidInputError(
                "a ratekeeper service decides several limits one by one: "
                "use all_or_nothing=False, or an Engine rule file for limits decided together"
            )

    @staticmethod
    def _release() -> None:
        raise InvalidLimitError("concurrency limits are decided in process only")


class ServiceStore(_Base):
    """A request store that asks the ratekeeper service at ``url`` (``http://host:port``)."""

    def __init__(
        self, url: str, *, timeout: float = DEFAULT_TIMEOUT, admin_token: str | None = None
    ) -> None:
        super().__init__(url, timeout, admin_token)
        self._client = _httpx().Client(base_url=self.url, timeout=self.timeout, limits=_limits())

    def _post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        try:
            return self._client.post(path, json=body, headers=headers)
        except self._errors as error:
            raise StoreError(f"ratekeeper service {redacted(self.url)}: {error}") from error

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        body = self._check(key, limit, cost, now)
        return _decision(self._post("/v1/check", body), self.url, body["cost"])

    def apply_many(
        self, hits: Any, *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        hits = list(hits)
        self._one_by_one(hits, all_or_nothing)
        return [self.apply(key, limit, cost, now) for key, limit, cost in hits]

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        self._release()
        raise AssertionError("unreachable")

    def reset(self, key: str, limit: Limit) -> None:
        body = {"key": check_key(key), "limit": limit_body(limit)}
        response = self._post("/v1/reset", body, self._admin)
        if response.status_code != 204:
            _answer(response, self.url)
            raise _foreign(response, self.url)

    def ping(self) -> Health:
        try:
            response = self._client.get("/readyz")
        except self._errors as error:
            return Health(False, error=str(error))
        return Health(response.status_code == 200, error=None)

    def close(self) -> None:
        self._client.close()


class AsyncServiceStore(_Base):
    """The asyncio twin of ``ServiceStore``."""

    def __init__(
        self, url: str, *, timeout: float = DEFAULT_TIMEOUT, admin_token: str | None = None
    ) -> None:
        super().__init__(url, timeout, admin_token)
        self._client = _httpx().AsyncClient(
            base_url=self.url, timeout=self.timeout, limits=_limits()
        )

    async def _post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        try:
            return await self._client.post(path, json=body, headers=headers)
        except self._errors as error:
            raise StoreError(f"ratekeeper service {redacted(self.url)}: {error}") from error

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision:
        body = self._check(key, limit, cost, now)
        return _decision(await self._post("/v1/check", body), self.url, body["cost"])

    async def apply_many(
        self, hits: Any, *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        hits = list(hits)
        self._one_by_one(hits, all_or_nothing)
        return [await self.apply(key, limit, cost, now) for key, limit, cost in hits]

    async def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision:
        self._release()
        raise AssertionError("unreachable")

    async def reset(self, key: str, limit: Limit) -> None:
        body = {"key": check_key(key), "limit": limit_body(limit)}
        response = await self._post("/v1/reset", body, self._admin)
        if response.status_code != 204:
            _answer(response, self.url)
            raise _foreign(response, self.url)

    async def ping(self) -> Health:
        try:
            response = await self._client.get("/readyz")
        except self._errors as error:
            return Health(False, error=str(error))
        return Health(response.status_code == 200, error=None)

    async def close(self) -> None:
        await self._client.aclose()


class RemoteLimiter(Limiter):
    """The ``Limiter`` API, decided by the ratekeeper service at ``url``.

    ``timeout`` bounds each call (seconds); ``on_store_error`` answers while the service cannot
    be reached, as for a Redis store. ``reset`` is an admin call: it needs the service's
    ``admin_token``. Example::

        limiter = RemoteLimiter("http://127.0.0.1:8080")
        limiter.hit(f"user:{user_id}", "10/minute").allowed
    """

    #: The service decides several limits only one by one.
    atomic_hit_many = False

    def __init__(
        self,
        url: str,
        *,
        algorithm: Algorithm | str = Algorithm.FIXED_WINDOW,
        timeout: float = DEFAULT_TIMEOUT,
        on_store_error: str | None = "allow",
        admin_token: str | None = None,
    ) -> None:
        from ratekeeper.stores.wrappers.resilience import Resilient

        store: Any = ServiceStore(url, timeout=timeout, admin_token=admin_token)
        if on_store_error is not None:
            store = Resilient(store, on_store_error=on_store_error)
        super().__init__(store, algorithm=algorithm)


class AsyncRemoteLimiter(AsyncLimiter):
    """The asyncio twin of ``RemoteLimiter``."""

    atomic_hit_many = False

    def __init__(
        self,
        url: str,
        *,
        algorithm: Algorithm | str = Algorithm.FIXED_WINDOW,
        timeout: float = DEFAULT_TIMEOUT,
        on_store_error: str | None = "allow",
        admin_token: str | None = None,
    ) -> None:
        from ratekeeper.stores.wrappers.resilience import AsyncResilient

        store: Any = AsyncServiceStore(url, timeout=timeout, admin_token=admin_token)
        if on_store_error is not None:
            store = AsyncResilient(store, on_store_error=on_store_error)
        super().__init__(store, algorithm=algorithm)
