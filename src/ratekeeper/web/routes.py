"""What the per-route adapters share (``ratekeeper.web.fastapi``, ``.flask``, ``.django``):
their options, checked once, and a gate for each group of limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ratekeeper.web.gate import AsyncGate, Gate
from ratekeeper.web.limits import RateLimit
from ratekeeper.web.problems import Problem
from ratekeeper.web.replies import Replies, Reply, problem_reply
from ratekeeper.web.request import MAX_BODY, Request


class RouteLimiter:
    """Per-route limits deciding with ``decider``. ``max_body`` bounds a body read for a key
    (longer is answered 413); ``headers``, ``ietf``, ``degraded_header`` and ``on_refused``
    go to ``Replies``; the other options (``cost``, ``all_or_nothing``, ``max_delay``,
    ``sleep``) to each route's gate. A bad option, or a decider of the wrong twin, raises
    here."""

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
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
            raise ValueError(f"max_body is a number of bytes, not {max_body!r}")
        self.decider = decider
        self.options = options
        self.replies = Replies(
            headers=headers, ietf=ietf, degraded_header=degraded_header, on_refused=on_refused
        )
        self.max_body = max_body

    def gate(self, limits: tuple[RateLimit, ...], scope: str | None) -> Any:
        """The gate of one ``limit(...)``: ``limits`` in ``scope``, else each route's own."""
        if not limits:
            raise ValueError("limit() needs at least one RateLimit")
        return self._gate(self.decider, limits, scope=scope, **self.options)

    def too_large(self) -> Reply:
        """The answer to a body longer than ``max_body``."""
        detail = f"a body read for a rate limit is at most {self.max_body} bytes"
        return problem_reply(Problem(413, "too-large", detail))
