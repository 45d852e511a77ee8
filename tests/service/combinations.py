"""The combination matrix's factors: each feature on or off beside the surface, the workers and
the request store, the combinations that cannot exist (and why), and the cases that cover
every pair of levels that can.

A case is one row: ``Case(surface="grpc", workers=2, store="cluster", shadow=True, ...)``.
``cases()`` generates the rows with allpairspy under ``impossible``; ``allowed_pairs()`` is
every pair of levels some possible row holds, worked out from all rows, so that a test can
check that the generated cases cover each of them (allpairspy's greedy search under
constraints is not bound to).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from allpairspy import AllPairs

#: Where the requests are decided: the service over HTTP (``/v1/check``), over gRPC
#: (``ShouldRateLimit``), a real nginx with ``auth_request`` in front of the service, and the
#: library (``ratekeeper.web``'s WSGI middleware in process; with 2 workers, two processes
#: over one shared store).
SURFACES = ("http", "grpc", "nginx", "library")
SERVICE = ("http", "grpc", "nginx")
STORES = ("memory", "redis", "cluster")
#: The features, each on or off in a case.
FEATURES = (
    "dashboard",  # serve --dashboard: /v1/stats and /v1/top, checked against the clients
    "metrics",  # /metrics (summed over the workers), checked against the clients
    "leased",  # the per-user limit (and the override) is `sync: leased`
    "debt",  # serve --debt (the library: Engine(debt=True), Limit(debt=True))
    "outcome",  # limits charged by outcome: failed requests (401) only
    "blocks",  # the address rule counts a /24 as one key (ipv4_prefix: 24)
    "shadow",  # serve --shadow-mode (the library: Engine(shadow=True))
    "overrides",  # a per-key override in the configuration store replaces the user limit
)
FACTORS: OrderedDict[str, tuple[Any, ...]] = OrderedDict(
    [("surface", SURFACES), ("workers", (1, 2)), ("store", STORES)]
    + [(feature, (False, True)) for feature in FEATURES]
)


@dataclass(frozen=True)
class Case:
    """One combination: a level of every factor."""

    surface: str
    workers: int
    store: str
    dashboard: bool = False
    metrics: bool = False
    leased: bool = False
    debt: bool = False
    outcome: bool = False
    blocks: bool = False
    shadow: bool = False
    overrides: bool = False

    @property
    def id(self) -> str:
        on = [name for name in FEATURES if getattr(self, name)]
        return "-".join([self.surface, f"w{self.workers}", self.store, *on])

    @property
    def service(self) -> bool:
        return self.surface in SERVICE

    @property
    def leases(self) -> bool:
        """Whether the user limit really leases: not on memory (where a leased limit is exact,
        one process holding the whole budget) nor with debt (a limit with debt is counted in
        the store: the engine drops the lease, as ``with_debt`` says)."""
        return self.leased and not self.debt and self.store != "memory"


def impossible(levels: Mapping[str, Any]) -> str | None:
    """Why a row holding ``levels`` (some or all of the factors) cannot exist, or None. Each
    constraint needs only the factors it names, so that allpairspy can ask of a partial row.
    """

    def given(*names: str) -> bool:
        return all(name in levels for name in names)

    if given("workers", "store") and levels["workers"] == 2 and levels["store"] == "memory":
        # The memory store counts per process: `serve --workers 2 --store memory://` is
        # refused at start (test_memory_store_with_two_workers_is_refused), and two library
        # processes cannot share one.
        return "two workers need a shared store"
    if given("surface", "outcome") and levels["outcome"] and levels["surface"] != "library":
        # Charging by outcome needs the application's answer, which only the web layer sees:
        # the service decides each request before it is served and never learns its status.
        return "outcome charges belong to the library's web layer"
    for feature in ("dashboard", "metrics"):
        if given("surface", feature) and levels[feature] and levels["surface"] == "library":
            # /v1/stats, /v1/top and /metrics are the service's routes.
            return f"the {feature} belongs to the service"
    if given("outcome", "shadow") and levels["outcome"] and levels["shadow"]:
        # A shadow limit counts every request: RateLimit refuses charge_statuses with shadow
        # (tests/web/test_charge_by_outcome.py), and a shadow rule is the Engine's, which
        # cannot give back.
        return "a shadow limit is not charged by outcome"
    if given("outcome", "overrides") and levels["outcome"] and levels["overrides"]:
        # Overrides are the Engine's (its configuration store); a limit charged by outcome
        # needs a decider that gives back (a Limiter): Gate(Engine(), charged) is a TypeError.
        return "overrides are the engine's, and the engine does not give back"
    return None


def _rows() -> Iterator[dict[str, Any]]:
    for values in itertools.product(*FACTORS.values()):
        yield dict(zip(FACTORS, values, strict=True))


Pair = tuple[tuple[str, Any], tuple[str, Any]]


def pairs_of(levels: Mapping[str, Any]) -> set[Pair]:
    """Every pair of factor levels that one row holds."""
    items = [(name, levels[name]) for name in FACTORS]
    return set(itertools.combinations(items, 2))


def allowed_pairs() -> set[Pair]:
    """Every pair of levels that some possible row holds (from all rows)."""
    found: set[Pair] = set()
    for row in _rows():
        if impossible(row) is None:
            found |= pairs_of(row)
    return found


def cases() -> list[Case]:
    """The generated rows, each possible, together covering ``allowed_pairs()``. allpairspy
    stops when a row adds no new pair; a pair it left uncovered is added as the first possible
    row holding it (there was none in this model when it was written)."""

    def possible(values: list[Any]) -> bool:
        return impossible(dict(zip(FACTORS, values, strict=False))) is None

    rows = [dict(row._asdict()) for row in AllPairs(FACTORS, filter_func=possible)]
    covered = set().union(*(pairs_of(row) for row in rows))
    for pair in sorted(allowed_pairs() - covered, key=repr):
        if pair in covered:
            continue
        row = next(r for r in _rows() if impossible(r) is None and set(pair) <= set(r.items()))
        rows.append(row)
        covered |= pairs_of(row)
    return [Case(**row) for row in rows]


def levels_of(case: Case) -> dict[str, Any]:
    return {field.name: asdict(case)[field.name] for field in fields(case)}
