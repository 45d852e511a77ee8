"""What the adapters share: the options of every adapter, checked once (``Adapter``), and the
per-route limiters' gate for each group of limits (``RouteLimiter``, for
``ratekeeper.web.fastapi``, ``.flask`` and ``.django``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ratekeeper.web.gate import AsyncGate, Gate
from ratekeeper.web.limits import RateLimit
from ratekeeper.web.replies import Replies, Reply, problem_reply
from ratekeeper.web.request import MAX_BODY, Request, declared_length
from ratekeeper.wire.problems import Problem


class Adapter:
    """The replies of an adapter and the bound on a body read for a key: ``max_body`` (longer is
    answered 413); ``headers``, ``ietf``, ``degraded_header`` and ``on_refused`` go to
    ``Replies``. A bad option raises here."""

    def __init__(
        self,
        *,
        max_body: int = MAX_BODY,
        headers: bool = True,
        ietf: bool = False,
        degraded_header: str | None = "X-RateLimit-Degraded",
        on_refused: Callable[[Request, Any], Reply] | None = None,
    ) -> None:
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
            raise ValueError(f"max_body is a number of bytes, not {max_body!r}")
        self.replies = Replies(
            headers=headers, ietf=ietf, degraded_header=degraded_header, on_refused=on_refused
        )
        self.max_body = max_body

    def bounded(self, declared: str | int | None, read: Callable[[], bytes]) -> bytes | None:
        """The body ``read()`` gives, or None when it is longer than ``max_body``; a body whose
        ``declared`` length (its ``Content-Length``) is longer is not read at all."""
        if declared_length(declared) > self.max_body:
            return None
        body = read()
        return body if len(body) <= self.max_body else None

    def too_large(self) -> Reply:
        """The answer to a body longer than ``max_body``."""
        detail = f"a body read for a rate limit is at most {self.max_body} bytes"
        return problem_reply(Problem.of("too-large", detail))


class RouteLimiter(Adapter):
    """Per-route limits deciding with ``decider``; ``max_body``, ``headers``, ``ietf``,
    ``degraded_header`` and ``on_refused`` are ``Adapter``'s, the other options (``cost``,
    ``all_or_nothing``, ``max_delay``, ``sleep``) go to each route's gate. A bad option, or a
    decider of the wrong twin, raises here."""

    _gate: type[Gate] | type[AsyncGate] = Gate

    def __init__(
        self,
        decider: Any,
        *,
        max_body: int = MAX_BODY,
        headers: bool = True,
        ietf: bool = False,
        degraded_header: str | None = "X-RateLimit-Degraded",
        on_refused: Callable[[Request, Any], Reply] | None = None,
        **options: Any,
    ) -> None:
        if "scope" in options:
            raise TypeError("a scope is given to limit(), for the routes that share it")
        self._gate(decider, **options)  # checks the options now
        super().__init__(
            max_body=max_body,
            headers=headers,
            ietf=ietf,
            degraded_header=degraded_header,
            on_refused=on_refused,
        )
        self.decider = decider
        self.options = options

    def gate(self, limits: tuple[RateLimit, ...], scope: str | None) -> Any:
        """The gate of one ``limit(...)``: ``limits`` in ``scope``, else each route's own."""
        if not limits:
            raise ValueError("limit() needs at least one RateLimit")
        return self._gate(self.decider, limits, scope=scope, **self.options)
