"""What a response tells of its rate limit, as one tuple a test compares whole."""

from __future__ import annotations

from collections.abc import Mapping

#: What a response tells: status, X-RateLimit-Limit, -Remaining, -Reset, Retry-After, RateLimit.
Told = tuple[int, str | None, str | None, str | None, str | None, str | None]


def told(status: int, headers: Mapping[str, str]) -> Told:
    names = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
    limit, remaining, reset = (headers.get(name) for name in names)
    return (status, limit, remaining, reset, headers.get("Retry-After"), headers.get("RateLimit"))
