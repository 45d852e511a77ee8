"""The per-route limiters' gate for each group of limits (``RouteLimiter``, for
``ratekeeper.web.fastapi``, ``.flask`` and ``.django``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic

from ratekeeper.web.limits import RateLimit
from ratekeeper.web.options import Adapter, AnyDecider, AnyGate
from ratekeeper.web.replies import Reply
from ratekeeper.web.request import MAX_BODY, Request
from ratekeeper.wire.headers import DEGRADED


class RouteLimiter(Adapter, Generic[AnyDecider, AnyGate]):
    """Per-route limits deciding with ``decider``; ``max_body``, ``headers``, ``ietf``,
    ``degraded_header`` and ``on_refused`` are ``Adapter``'s, the other options (``cost``,
    ``all_or_nothing``, ``max_delay``, ``sleep``) go to each route's gate, the subclass's
    ``_gate``. A bad option, or a decider of the wrong twin, raises here."""

    _gate: type[AnyGate]

    def __init__(
        self,
        decider: AnyDecider,
        *,
        max_body: int = MAX_BODY,
        headers: bool = True,
        ietf: bool = False,
        degraded_header: str | None = DEGRADED,
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

    def gate(self, limits: tuple[RateLimit, ...], scope: str | None) -> AnyGate:
        """The gate of one ``limit(...)``: ``limits`` in ``scope``, else each route's own."""
        if not limits:
            raise ValueError("limit() needs at least one RateLimit")
        return self._gate(self.decider, limits, scope=scope, **self.options)
