"""``application/problem+json`` bodies (RFC 9457): what went wrong with a request, and where.

Every member is the RFC's except ``pointer``, a JSON Pointer (RFC 6901) to the part of the
request body at fault (``/descriptors/0/entries/1/key``), or the query parameter or header that
is, when the problem has a place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

MEDIA_TYPE = "application/problem+json"
#: The problem types ratekeeper answers, each a URN naming one kind of problem.
TYPES = {
    "malformed": "urn:ratekeeper:problem:malformed-json",
    "invalid": "urn:ratekeeper:problem:invalid-input",
    "too-large": "urn:ratekeeper:problem:too-large",
    "unauthorized": "urn:ratekeeper:problem:unauthorized",
    "not-found": "urn:ratekeeper:problem:not-found",
    "unavailable": "urn:ratekeeper:problem:unavailable",
    "method": "urn:ratekeeper:problem:method-not-allowed",
    "media-type": "urn:ratekeeper:problem:unsupported-media-type",
    "limited": "urn:ratekeeper:problem:rate-limited",
}


def pointer(path: Iterable[str | int]) -> str:
    """The JSON Pointer of ``path``: ``["descriptors", 0, "key"]`` gives ``/descriptors/0/key``."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


@dataclass(frozen=True, slots=True)
class Problem(Exception):
    """One problem with a request: its HTTP ``status``, its kind (a key of ``TYPES``), a
    ``detail`` for a person, and where it is (a JSON Pointer, or None). Raised by a parser,
    answered by the service."""

    status: int
    kind: str
    detail: str
    where: str | None = None

    def body(self) -> dict[str, Any]:
        """The problem's JSON object."""
        result: dict[str, Any] = {
            "type": TYPES[self.kind],
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
