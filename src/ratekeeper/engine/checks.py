"""A check's descriptors: checked once, where they enter (``requests``), then planned into
the batch the store decides (``prepare``), Envoy's ``replaces`` applied."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ratekeeper.core.errors import InvalidInputError
from ratekeeper.core.inputs import check_cost, check_key, check_text
from ratekeeper.core.limits import Limit, with_debt
from ratekeeper.core.store_keys import descriptor_key, identity
from ratekeeper.engine.plans import Plan, Planner, Request
from ratekeeper.engine.verdict import Descriptor
from ratekeeper.rules.matching import replaced_names
from ratekeeper.rules.model import Entry

if TYPE_CHECKING:
    from ratekeeper.stores import Hit


def requests(
    domain: str, descriptors: Sequence[Descriptor | Sequence[Entry]], hits: int
) -> list[Request]:
    """Each descriptor as ``(entries, limit, cost)``, its entries a hashable tuple.

    Everything is checked here, once, before anything is counted: the domain is a string; each
    descriptor is a ``Descriptor`` or a sequence of ``(key, value)`` string pairs (keys
    non-empty); a limit sent with one is a ``Limit``; costs are valid (``ratekeeper.core.inputs``).
    Raises ``InvalidInputError`` naming the bad value.
    """
    check_text(domain, "domain")
    given: Any = descriptors  # typed for callers; checked as anything
    if isinstance(given, str | bytes) or not isinstance(given, Sequence):
        raise InvalidInputError(f"descriptors must be a list of descriptors, not {descriptors!r}")
    if not descriptors:
        raise InvalidInputError("a check needs at least one descriptor")
    hits = check_cost(hits)
    result: list[Request] = []
    entries: Any
    for descriptor in descriptors:
        if isinstance(descriptor, Descriptor):
            entries, limit, given = descriptor
            cost = hits if given is None else check_cost(given)
            if limit is not None and not isinstance(limit, Limit):
                raise InvalidInputError(f"a descriptor's limit must be a Limit, not {limit!r}")
        else:
            entries, limit, cost = descriptor, None, hits
        result.append((_entries(entries), limit, cost))
    return result


def _entries(entries: Any) -> tuple[Entry, ...]:
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise InvalidInputError(f"a descriptor is a list of (key, value) entries, not {entries!r}")
    checked = []
    for entry in entries:
        if isinstance(entry, str | bytes) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise InvalidInputError(f"a descriptor entry is a (key, value) pair, not {entry!r}")
        key, value = entry
        checked.append((check_key(key, "descriptor key"), check_text(value, "descriptor value")))
    return tuple(checked)


def prepare(
    planner: Planner,
    domain: str,
    requests: list[Request],
    loaded: dict[tuple[Entry, ...], Plan] | None = None,
) -> tuple[list[Plan], list[Hit]]:
    """The plans of a ``check`` and its store batch, which skips what is not counted.

    ``loaded`` holds plans the caller loaded already (the async engine, away from its event
    loop): used when the cache does not have them, which it may not keep (a long key) or may
    have dropped since."""
    plans: list[Plan] = []
    batch: list[Hit] = []
    replaced = False
    cached = planner.cache.get
    for entries, limit, _ in requests:
        if limit is not None:
            known = domain in planner.rules.domains  # as Envoy: no limit in an unknown domain
            counted_as = identity(domain, descriptor_key(entries))
            sent = with_debt(limit) if planner.debt else limit
            plan = Plan(counted_as, sent if known else None, None, False)
        else:
            plan = (
                cached((domain, entries))
                or (loaded and loaded.get(entries))
                or planner.load_descriptor(domain, entries)
            )
            if plan.rule is not None and plan.rule.replaces:
                replaced = True
        plans.append(plan)
    if replaced:
        plans = _replace(plans)
    for plan, (_, _, cost) in zip(plans, requests, strict=True):
        if plan.limit is not None:
            batch.append((plan.identity, plan.limit, cost))
    return plans, batch


def _replace(plans: list[Plan]) -> list[Plan]:
    """Drop every matched limit that another matched limit ``replaces`` (Envoy's semantics)."""
    names = replaced_names(plan.rule for plan in plans)
    return [
        plan._replace(limit=None, refused=False)
        if plan.rule is not None and plan.rule.name in names and not plan.overridden
        else plan
        for plan in plans
    ]
