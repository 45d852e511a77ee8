"""``application/problem+json`` bodies (RFC 9457): what went wrong with a request, and where.

Every member is the RFC's except ``pointer``, a JSON Pointer (RFC 6901) to the part of the
request body at fault (``/descriptors/0/entries/1/key``), or the query parameter or header that
is, when the problem has a place.

``KINDS`` is the one table of the kinds of problem ratekeeper answers, each with its HTTP status
and its type; ``problem_of`` is the one mapping of ratekeeper's errors onto them. The decision
service, its OpenAPI document and the web middleware all answer through these.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, NamedTuple

from ratekeeper.core.errors import (
    ConfigError,
    ConfigStoreError,
    InvalidInputError,
    InvalidLimitError,
    StoreConfigError,
    StoreError,
)

MEDIA_TYPE = "application/problem+json"


class Kind(NamedTuple):
    """One kind of problem: the HTTP ``status`` it is answered with, and its ``type``, a URN."""

    status: int
    type: str


#: The kinds of problem ratekeeper answers, by the name a ``Problem`` gives its kind.
KINDS = {
    "malformed": Kind(400, "urn:ratekeeper:problem:malformed-json"),
    "invalid": Kind(422, "urn:ratekeeper:problem:invalid-input"),
    "too-large": Kind(413, "urn:ratekeeper:problem:too-large"),
    "unauthorized": Kind(401, "urn:ratekeeper:problem:unauthorized"),
    "not-found": Kind(404, "urn:ratekeeper:problem:not-found"),
    "unavailable": Kind(503, "urn:ratekeeper:problem:unavailable"),
    "overloaded": Kind(503, "urn:ratekeeper:problem:overloaded"),
    "method": Kind(405, "urn:ratekeeper:problem:method-not-allowed"),
    "media-type": Kind(415, "urn:ratekeeper:problem:unsupported-media-type"),
    "limited": Kind(429, "urn:ratekeeper:problem:rate-limited"),
}
#: The errors that are the caller's: a key, cost, limit or override that is not valid.
INVALID_ERRORS = (InvalidInputError, InvalidLimitError, ConfigError)
#: The errors that are a store's: the request store or the configuration store failed.
UNAVAILABLE_ERRORS = (StoreError, StoreConfigError, ConfigStoreError)


def pointer(path: Iterable[str | int]) -> str:
    """The JSON Pointer of ``path``: ``["descriptors", 0, "key"]`` gives ``/descriptors/0/key``."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


@dataclass(frozen=True, slots=True)
class Problem(Exception):
    """One problem with a request: its HTTP ``status``, its kind (a key of ``KINDS``), a
    ``detail`` for a person, and where it is (a JSON Pointer, or None). Raised by a parser,
    answered by the service. ``Problem.of`` gives a kind its own status."""

    status: int
    kind: str
    detail: str
    where: str | None = None

    @classmethod
    def of(cls, kind: str, detail: str, where: str | None = None) -> Problem:
        """A problem of ``kind``, with the status ``KINDS`` gives it:
        ``Problem.of("invalid", "cost must be an integer")`` is a 422."""
        return cls(KINDS[kind].status, kind, detail, where)

    def body(self) -> dict[str, Any]:
        """The problem's JSON object."""
        result: dict[str, Any] = {
            "type": KINDS[self.kind].type,
            "title": HTTPStatus(self.status).phrase,
            "status": self.status,
            "detail": self.detail,
        }
        if self.where is not None:
            result["pointer"] = self.where
        return result

    def encode(self) -> bytes:
        """The problem's body as UTF-8 JSON."""
        return json.dumps(self.body(), ensure_ascii=False).encode()


def problem_of(error: Exception) -> Problem | None:
    """The problem that answers ``error``: itself when it is one, ``invalid`` (422) for an
    ``INVALID_ERRORS``, ``unavailable`` (503) for an ``UNAVAILABLE_ERRORS``; else None, an
    error that is no caller's and no store's (a defect, answered 500)."""
    if isinstance(error, Problem):
        return error
    if isinstance(error, INVALID_ERRORS):
        return Problem.of("invalid", str(error))
    if isinstance(error, UNAVAILABLE_ERRORS):
        return Problem.of("unavailable", str(error))
    return None
