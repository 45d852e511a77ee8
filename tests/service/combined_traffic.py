"""The requests every case of the combination matrix sends, and what each one must get.

One rule file for every case (domain ``edge``, each case in a store prefix or a store of its
own), and one sequence of 49 requests, sent one after the other, so that every answer is
known in advance:

- ``alice``: 24 requests by user alice (``per_user``: 20 a day, a fixed window; ``sync:
  leased`` when the case leases), from five addresses in five /24s, so that no address
  refuses: 20 admitted, 4 refused. Charged by outcome, two of them succeed and are given
  back, so only the last 2 are refused.
- ``block``: 12 requests from three addresses of 127.0.20.0/24, 4 each (``per_address``: 6
  an hour, GCRA): each address apart admits all of them; with an address block the /24 is one
  key, which admits 6 and refuses 6.
- ``single``: 8 requests from 127.0.40.2: 6 admitted, 2 refused. With debt the refused
  ones count too, so the second refusal's ``Retry-After`` is an interval later.
- ``vip``: 5 requests by user vip, whose override (3 an hour, GCRA) replaces ``per_user``:
  3 admitted, 2 refused; without it, all 5.

``expect(case)`` follows the sequence through a model of the counters: each descriptor counts
on its own (Envoy's semantics; the library's limits are decided each on its own too), a
refused hit counts nothing unless the case has debt, shadow mode lets every request through,
and a request charged by outcome gives back its units unless it failed (401) or was refused
with debt. No window turns during a case (a day's fixed window is waited past when it ends
within a minute, and GCRA refills one unit in 3 minutes or more).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.service.combinations import Case

DOMAIN = "edge"
DAY = 86_400.0
HOUR = 3_600.0
#: lease_share, the default: a process asks for at most this share of a limit's capacity.
LEASE_SHARE = 0.1


@dataclass(frozen=True)
class Limit:
    """A limit as the model counts it."""

    rule: str  # the rule's name, as the metrics and the dashboard say it
    amount: int
    algorithm: str  # "fixed_window" or "gcra"
    period: float

    @property
    def interval(self) -> float:
        return self.period / self.amount


USER = Limit("per_user", 20, "fixed_window", DAY)
ADDRESS = Limit("per_address", 6, "gcra", HOUR)
VIP = Limit("per_user", 3, "gcra", HOUR)  # the override of user:vip


def rules(case: Case) -> str:
    """The rule file of ``case``."""
    sync = ", sync: leased" if case.leased else ""
    block = "    ipv4_prefix: 24\n" if case.blocks else ""
    return (
        f"domain: {DOMAIN}\n"
        "descriptors:\n"
        "  - key: user\n"
        f"    rate_limit: {{unit: day, requests_per_unit: {USER.amount}, name: per_user{sync}}}\n"
        "  - key: remote_address\n"
        f"{block}"
        f"    rate_limit: {{unit: hour, requests_per_unit: {ADDRESS.amount}, algorithm: gcra,"
        " name: per_address}\n"
    )


@dataclass(frozen=True)
class Request:
    """One request: from ``address``, by ``user`` (None: no user); ``fails`` when the
    application answers it 401 (what a limit charged by outcome charges)."""

    address: str
    user: str | None
    fails: bool = True

    @property
    def headers(self) -> dict[str, str]:
        """The request as nginx describes it to ``/v1/nginx``."""
        found = {"X-Real-IP": self.address, "X-Original-URI": self.path}
        found["X-Original-Method"] = "GET"
        if self.user is not None:
            found["X-User"] = self.user
        return found

    @property
    def path(self) -> str:
        return "/login?fail=1" if self.fails else "/login"


def traffic() -> list[Request]:
    alice = [Request(f"127.0.{10 + n % 5}.2", "alice", n not in (3, 10)) for n in range(24)]
    block = [Request(f"127.0.20.{2 + n % 3}", None) for n in range(12)]
    single = [Request("127.0.40.2", None) for _ in range(8)]
    vip = [Request("127.0.30.2", "vip") for _ in range(5)]
    ordered = []
    for n in range(len(alice)):
        for group in (alice, block, single, vip):
            if n < len(group):
                ordered.append(group[n])
    return ordered


def address_key(address: str, case: Case) -> str:
    """The key an address counts under: its /24 with blocks, else itself."""
    if case.blocks:
        return "remote_address:" + address.rsplit(".", 1)[0] + ".0/24"
    return f"remote_address:{address}"


def limited(request: Request, case: Case) -> list[tuple[str, Limit]]:
    """The counted descriptors of ``request``, in the request's order: its address, then its
    user (nginx's order: ``[remote_address]``, ``[user]``, then the paths no rule limits)."""
    found = [(address_key(request.address, case), ADDRESS)]
    if request.user is not None:
        vip = request.user == "vip" and case.overrides
        found.append((f"user:{request.user}", VIP if vip else USER))
    return found


def leasing(key: str, case: Case) -> bool:
    """Whether ``key``'s limit grants from slices in ``case`` (then a decision's remaining is
    an estimate, and a refusal answered in process says when the process asks again)."""
    return case.leases and key.startswith("user:")


def idle_bound(limit: Limit, case: Case) -> int:
    """What slices may hold idle at once (docs/leases.md): N x lease_share x capacity."""
    return math.floor(case.workers * LEASE_SHARE * limit.amount)


@dataclass
class Status:
    """One counted descriptor of one answer, as the model expects it."""

    key: str
    limit: Limit
    count: int  # units counted once the request is settled
    granted: bool  # its limit admitted the hit
    shadowed: bool  # refused, and let through by shadow mode
    retry: float  # seconds until a hit could pass, at the start of the case (0: allowed)
    window_left: float  # a fixed window's seconds left at the start of the case

    @property
    def reset(self) -> float:
        """Seconds until the limit is whole again, at the start of the case."""
        if self.limit.algorithm == "fixed_window":
            return self.window_left if self.count else 0.0
        return self.count * self.limit.interval

    @property
    def allowed(self) -> bool:
        """Its status is OK (a shadowed one included)."""
        return self.granted or self.shadowed

    @property
    def remaining(self) -> int:
        return max(self.limit.amount - self.count, 0)


@dataclass
class Answer:
    """What one request must get."""

    request: Request
    allowed: bool  # as its client sees it
    statuses: list[Status]
    status: int  # the HTTP status a web client gets (401: admitted, the login failed)


@dataclass
class Expected:
    """Every answer, and the totals the service's figures must show."""

    answers: list[Answer] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # units counted per key at the end
    limits: dict[str, Limit] = field(default_factory=dict)

    def results(self) -> Counter[tuple[str, str]]:
        """Decisions by (rule, result), one per descriptor, as ``/metrics`` counts them:
        the answers' counted descriptors, and the ``[path]`` and ``[method, path]`` of every
        request, which no rule limits (rule ``none``)."""
        found: Counter[tuple[str, str]] = Counter()
        for answer in self.answers:
            found["none", "allowed"] += 2
            for status in answer.statuses:
                result = "shadowed" if status.shadowed else "allowed"
                found[status.limit.rule, result if status.allowed else "limited"] += 1
        return found

    def per_key(self) -> tuple[Counter[str], Counter[str], dict[str, Status]]:
        """Decisions and refusals (shadowed ones included) per key, and each key's latest
        status: what ``/v1/top`` shows."""
        decided: Counter[str] = Counter()
        refused: Counter[str] = Counter()
        latest = {}
        for answer in self.answers:
            for status in answer.statuses:
                decided[status.key] += 1
                refused[status.key] += 0 if status.granted else 1
                latest[status.key] = status
        return decided, refused, latest


def retry_of(limit: Limit, count: int, window_left: float) -> float:
    """Seconds until a refused hit could pass, ``count`` units counted, at the case's start
    (the caller allows for the time since)."""
    if limit.algorithm == "fixed_window":
        return window_left
    return (count + 1 - limit.amount) * limit.interval  # each unit past the burst: an interval


def expect(case: Case) -> Expected:
    """What ``case``'s traffic must get (see the module); leased keys' answers are as exact
    mode gives them, which the caller holds to the leases' bound instead."""
    expected = Expected()
    window_left = DAY - time.time() % DAY  # the fixed window's, at the start of the case
    counts: Counter[str] = Counter()
    charged_by_outcome = case.outcome
    for request in traffic():
        statuses = []
        for key, limit in limited(request, case):
            fits = counts[key] + 1 <= limit.amount
            if fits or case.debt:
                counts[key] += 1
            retry = 0.0 if fits else retry_of(limit, counts[key], window_left)
            statuses.append(
                Status(key, limit, counts[key], fits, case.shadow and not fits, retry, window_left)
            )
            expected.limits[key] = limit
        allowed = all(status.allowed for status in statuses)
        if charged_by_outcome and (not allowed or not request.fails):
            for status in statuses:  # given back: the admitted hits of a refused or good one
                if status.granted:
                    counts[status.key] -= 1
                    status.count -= 1
        status_code = 429 if not allowed else 401 if request.fails and case.outcome else 200
        expected.answers.append(Answer(request, allowed, statuses, status_code))
    expected.counts = dict(counts)
    return expected


def closest(statuses: list[Status]) -> Status | None:
    """The status the rate-limit headers describe (``ratekeeper.wire.headers``): a refusing
    one first, then the fewest remaining, then the one that resets last."""
    if not statuses:
        return None
    return min(statuses, key=lambda s: (s.allowed, s.remaining, -s.reset))
