"""What a web request is told of its ``GateDecision``: headers, and the answer to a refused one.

``Replies`` holds the options every adapter shares. A refused request is answered 429 with an
``application/problem+json`` body (type ``urn:ratekeeper:problem:rate-limited``, with
``retry_after`` in seconds), ``Retry-After`` and the ``X-RateLimit-*`` headers of
``ratekeeper.wire.headers`` (plus the IETF ``RateLimit`` and ``RateLimit-Policy`` fields with
``ietf=True``); ``on_refused(request, outcome)`` may answer instead, and the headers are added
to what it returns unless it set them. An admitted request's response gets the same headers
(``headers=False`` leaves it alone). A decision made by the store's failure policy adds
``X-RateLimit-Degraded: true`` (``degraded_header`` names it; None leaves it out). A store that
failed without a policy is answered 503, a problem of type ``unavailable``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from ratekeeper.web.outcomes import GateDecision
from ratekeeper.web.request import Request
from ratekeeper.wire.headers import DEGRADED, RETRY_AFTER, rate_limit_headers, seconds
from ratekeeper.wire.problems import MEDIA_TYPE, Problem

#: A header's name: an RFC 9110 token.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")


class Reply(NamedTuple):
    """An HTTP answer made without the application: a status, headers and a body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def problem_reply(problem: Problem, headers: list[tuple[str, str]] | None = None) -> Reply:
    """``problem`` as an ``application/problem+json`` reply, with ``headers`` after its own."""
    return Reply(problem.status, [("Content-Type", MEDIA_TYPE), *(headers or [])], problem.encode())


def refused(request: Request, outcome: GateDecision) -> Reply:
    """The default answer to a refused request: 429 and a problem+json body."""
    wait = seconds(outcome.retry_after)
    detail = f"Too many requests; retry after {wait} second{'' if wait == 1 else 's'}."
    problem = Problem.of("limited", detail)
    body = problem.body()
    body["retry_after"] = wait
    encoded = json.dumps(body, ensure_ascii=False).encode()
    return Reply(problem.status, [("Content-Type", MEDIA_TYPE)], encoded)


@dataclass(frozen=True)
class Replies:
    """How outcomes are told (see the module's doc); checked when built."""

    headers: bool = True
    ietf: bool = False
    degraded_header: str | None = DEGRADED
    on_refused: Callable[[Request, GateDecision], Reply] | None = None

    def __post_init__(self) -> None:
        if self.on_refused is not None and not callable(self.on_refused):
            raise TypeError(f"on_refused must be callable, not {self.on_refused!r}")
        for name in ("headers", "ietf"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} is True or False, not {getattr(self, name)!r}")
        degraded = self.degraded_header
        if degraded is not None and (not isinstance(degraded, str) or not _TOKEN.match(degraded)):
            raise ValueError(f"degraded_header is a header's name, or None, not {degraded!r}")

    def headers_of(self, outcome: GateDecision) -> list[tuple[str, str]]:
        """The rate-limit headers of ``outcome``."""
        found = rate_limit_headers(outcome.statuses, ietf=self.ietf)
        if not outcome.allowed:
            found[RETRY_AFTER] = str(seconds(outcome.retry_after))
        if outcome.degraded and self.degraded_header:
            found[self.degraded_header] = "true"
        return list(found.items())

    def admitted(self, outcome: GateDecision | None) -> list[tuple[str, str]]:
        """The headers to add to an admitted request's response (none for None: nothing to
        tell)."""
        if not self.headers or outcome is None:
            return []
        return self.headers_of(outcome)

    def refusal(self, request: Request, outcome: GateDecision) -> Reply:
        """The answer to a request ``outcome`` refuses, or a 503 when the store failed."""
        if outcome.unavailable is not None:
            detail = "the rate limiter's request store is unavailable"
            return problem_reply(Problem.of("unavailable", detail))
        reply = (self.on_refused or refused)(request, outcome)
        if not isinstance(reply, Reply):
            raise TypeError(f"on_refused returns a Reply(status, headers, body), not {reply!r}")
        return reply._replace(headers=merged(reply.headers, self.headers_of(outcome)))


def merged(headers: list[tuple[str, str]], more: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` followed by those of ``more`` whose names it does not hold yet."""
    present = {name.lower() for name, _ in headers}
    return headers + [(name, value) for name, value in more if name.lower() not in present]
