"""What every adapter takes, checked once: ``Adapter`` (its replies and the bound on a body read
for a key) and ``Middleware`` (what the ASGI and WSGI middleware twins share: the application
they wrap, its gate and the paths exempt from it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ratekeeper.decider import AsyncDecider, Decider
from ratekeeper.web.limits import ExemptLike, RateLimit, exemption
from ratekeeper.web.plans import BaseGate
from ratekeeper.web.replies import Replies, Reply, problem_reply
from ratekeeper.web.request import MAX_BODY, Request, declared_length
from ratekeeper.wire.headers import DEGRADED
from ratekeeper.wire.problems import Problem

#: The application a middleware wraps.
App = TypeVar("App")
#: What an adapter's gates decide with: a ``Decider`` for a ``Gate``, an ``AsyncDecider`` for
#: an ``AsyncGate``.
AnyDecider = TypeVar("AnyDecider", bound=Decider | AsyncDecider)
#: The twin an adapter decides with: ``Gate`` or ``AsyncGate``.
AnyGate = TypeVar("AnyGate", bound=BaseGate)


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
        degraded_header: str | None = DEGRADED,
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


class Middleware(Adapter, Generic[App, AnyDecider, AnyGate]):
    """The constructor of both middleware twins, ``ratekeeper.web.asgi.RateLimitMiddleware``
    (whose doc states the options) and ``ratekeeper.web.wsgi.RateLimitMiddleware``: ``app`` is
    kept, ``decider``, ``limits`` and the gate's options go to the twin's gate (``_gate``),
    ``exempt`` is checked, and the rest are ``Adapter``'s. A bad option raises here."""

    _gate: type[AnyGate]

    def __init__(
        self,
        app: App,
        decider: AnyDecider,
        limits: list[RateLimit] | tuple[RateLimit, ...] = (),
        *,
        exempt: ExemptLike = (),
        max_body: int = MAX_BODY,
        headers: bool = True,
        ietf: bool = False,
        degraded_header: str | None = DEGRADED,
        on_refused: Callable[[Request, Any], Reply] | None = None,
        **options: Any,
    ) -> None:
        self.app = app
        self.gate = self._gate(decider, limits, **options)
        self.exempt = exemption(exempt)
        super().__init__(
            max_body=max_body,
            headers=headers,
            ietf=ietf,
            degraded_header=degraded_header,
            on_refused=on_refused,
        )
