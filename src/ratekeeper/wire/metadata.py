"""The dynamic metadata of Envoy's answer, built as Envoy's reference rate-limit service builds
it (``ratelimitToMetadata`` in its ``src/service/ratelimit.go``) when asked to
(``RESPONSE_DYNAMIC_METADATA``); Envoy puts it under the filter's namespace,
``envoy.filters.http.ratelimit``, for other filters and the access log to read.

``dynamic_metadata(call, statuses)`` is a JSON-like ``dict``, a ``google.protobuf.Struct``'s
fields:

- ``domain``: the request's domain;
- ``descriptors``: one object per descriptor, in the request's order: ``entries``, a list of
  ``"key=value"``; ``limit``, when a limit is sent with it, in protobuf's text format
  (``"requests_per_unit:10 unit:MINUTE"``, default values left out); ``hitsAddend``, when
  the descriptor sends one of its own (0 included);
- ``hitsAddend``: the request's, when not 0;
- ``metadata``: the ``metadata`` of the rules of the descriptors that passed, merged, when any
  has some. A descriptor passed when its status is OK and its rule is not ``unlimited``: a
  rule's own ``shadow_mode`` passes, the service's ``--shadow-mode`` and an over-limit
  descriptor in quota mode do not. The first passing descriptor's keys win; a key whose
  values are both objects is merged the same way, one level down, and so on. A descriptor
  with a limit of its own, or whose rule is ``detailed_metric``, brings none (the reference
  builds their limit afresh, without the metadata), nor does one whose limit another's
  ``replaces`` drops.

Example: ``rl`` with descriptors ``[service=service_1]`` (its rule's metadata
``{"service_with_quota": {"name": "service_1"}}``, over its limit in quota mode) and
``[service=service_2]`` (``{"service_with_quota": {"name": "service_2"}}``, passing), each
with ``hitsAddend`` 0, gives ``{"domain": "rl", "descriptors": [{"entries":
["service=service_1"], "hitsAddend": 0}, {"entries": ["service=service_2"], "hitsAddend": 0}],
"metadata": {"service_with_quota": {"name": "service_2"}}}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ratekeeper.engine.verdict import Status
    from ratekeeper.rules.model import Entry


class Sent(Protocol):
    """One descriptor as the wire sent it (``translate.WireDescriptor``)."""

    @property
    def entries(self) -> tuple[Entry, ...]: ...
    @property
    def limit(self) -> tuple[int, str] | None: ...
    @property
    def hits_addend(self) -> int | None: ...


class Request(Protocol):
    """A rate-limit request as the wire sent it (``translate.Call``)."""

    @property
    def domain(self) -> str: ...
    @property
    def descriptors(self) -> Sequence[Sent]: ...
    @property
    def hits_addend(self) -> int: ...


def dynamic_metadata(call: Request, statuses: Sequence[Status | None]) -> dict[str, Any]:
    """The dynamic metadata of the answer to ``call`` whose descriptors ended in ``statuses``,
    in the request's order (None for a descriptor refused without the engine: a limit of 0
    sent with it)."""
    fields: dict[str, Any] = {
        "domain": call.domain,
        "descriptors": [_descriptor(one) for one in call.descriptors],
    }
    if call.hits_addend:
        fields["hitsAddend"] = call.hits_addend
    merged: dict[str, Any] = {}
    for one, status in zip(call.descriptors, statuses, strict=True):
        if status is None or one.limit is not None or not _passed(status):
            continue
        rule = status.rule  # a limit replaced by another's ``replaces`` applies none
        if (
            rule is not None
            and rule.metadata
            and status.limit is not None
            and not rule.detailed_metric
        ):
            _merge(merged, rule.metadata)
    if merged:
        fields["metadata"] = merged
    return fields


def _passed(status: Status) -> bool:
    """Whether the reference counts the descriptor as passed: its own status OK, and not an
    unlimited one. The service's ``--shadow-mode`` lets a refusal through, but its status
    stays OVER_LIMIT there."""
    rule = status.rule
    if not status.allowed or (rule is not None and rule.unlimited):
        return False
    return not status.shadowed or (rule is not None and rule.shadow_mode)


def _descriptor(one: Sent) -> dict[str, Any]:
    found: dict[str, Any] = {"entries": [f"{key}={value}" for key, value in one.entries]}
    if one.limit is not None:
        found["limit"] = limit_text(*one.limit)
    if one.hits_addend is not None:
        found["hitsAddend"] = one.hits_addend
    return found


def limit_text(requests_per_unit: int, unit: str) -> str:
    """A ``RateLimitOverride`` in protobuf's text format, on one line, default values left out:
    ``limit_text(10, "minute")`` is ``"requests_per_unit:10 unit:MINUTE"``."""
    parts = []
    if requests_per_unit:
        parts.append(f"requests_per_unit:{requests_per_unit}")
    name = str(unit).upper()
    if name != "UNKNOWN":
        parts.append(f"unit:{name}")
    return " ".join(parts)


def _merge(into: dict[str, Any], source: Mapping[Any, Any]) -> None:
    """``source`` merged into ``into``: a key ``into`` lacks is added (a copy), a key both hold
    as objects is merged one level down, any other key ``into`` holds is kept."""
    for key, value in source.items():
        name = str(key)
        if name not in into:
            into[name] = _plain(value)
        elif isinstance(into[name], dict) and isinstance(value, Mapping):
            _merge(into[name], value)


def _plain(value: Any) -> Any:
    """``value`` as a ``google.protobuf.Struct`` holds it: objects with text keys, lists,
    numbers, text, booleans and null; anything else (a YAML date) as its text."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
