"""``RateLimit``: one limit of a web application, and who it counts against.

A ``RateLimit`` names a limit (``"5/minute"``, several as ``"100/day; 10/minute"``, or a
``Limit``), the ``key`` of a request it counts against (the client's address by default), and
optionally a ``scope``, a ``cost``, the ``methods`` it applies to, an ``exempt`` test and
``shadow`` mode. Every option is checked here, when the limit is built.

The counter of a request is named by the scope and the key's entries
(``scope:login|remote_address:10.0.0.1``, escaped by
``ratekeeper.core.store_keys.descriptor_key``), so routes that share a scope share their
counters, and a route's own limits (scope None) count apart from every other route's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from ratekeeper.core.inputs import check_cost
from ratekeeper.core.limits import Limit
from ratekeeper.core.rates import parse_many
from ratekeeper.core.store_keys import bounded, descriptor_key
from ratekeeper.web import keys
from ratekeeper.web.keys import Key, KeyFunction
from ratekeeper.web.outcomes import HandlerResult, Judge, check_charging
from ratekeeper.web.request import Request

#: A request's cost: a fixed number, or a function of the request.
CostLike = int | Callable[[Request], int]
#: How many scopes' counter prefixes a limit remembers (one per route it limits).
MAX_PREFIXES = 1024


@dataclass(frozen=True)
class RateLimit:
    """One limit: ``limit`` on each ``key`` (see the module's doc). A rate string is counted
    by the decider's algorithm (a ``Limiter``'s default is a fixed window, which lets twice
    the limit through around its edge); a ``Limit`` names its own. Example, a login's guesses
    in any 15 minutes::

        guesses = Limit(5, "15 minutes", "sliding_log")
        RateLimit(guesses, key=keys.field("username", str.casefold), scope="login")

    ``key`` is a ``Key`` or a function of a ``Request`` (default: ``keys.client_ip()``,
    which trusts no proxy); a request whose key is None is not counted. ``cost`` is an int or
    a function of the request. ``methods`` limits only those methods (any when None);
    ``exempt(request)`` true lets a request through uncounted; ``shadow`` counts and logs
    but never refuses, and leaves the response's headers alone.

    ``charge_when(result)`` or ``charge_statuses`` charge a request by its outcome
    (``ratekeeper.web.outcomes``): it is counted before the handler runs (and refused past
    the limit), then given back unless its ``HandlerResult`` is one the limit charges, e.g.
    failed logins only::

        RateLimit(guesses, key=keys.field("username"), charge_statuses={401, 403})

    A bad limit raises ``InvalidLimitError``, a bad cost ``InvalidInputError``, a bad option
    ``TypeError`` or ``ValueError``.
    """

    limit: Limit | str
    key: Key | KeyFunction = field(default_factory=keys.client_ip)
    scope: str | None = None
    cost: CostLike = 1
    methods: Iterable[str] | None = None
    exempt: Callable[[Request], bool] | None = None
    shadow: bool = False
    charge_when: Callable[[HandlerResult], bool] | None = None
    charge_statuses: Iterable[int] | None = None
    # Worked out once, when the limit is built: each request only reads them.
    _key: Key = field(init=False, repr=False, compare=False)
    _limits: tuple[Limit | str, ...] = field(init=False, repr=False, compare=False)
    _prefixes: dict[str, str] = field(init=False, repr=False, compare=False)
    _judge: Judge | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.limit, str):
            parse_many(self.limit)  # raises InvalidLimitError naming the bad part
        elif not isinstance(self.limit, Limit):
            raise TypeError(f"a limit is a Limit or a rate string, not {self.limit!r}")
        object.__setattr__(self, "key", keys.as_key(self.key))
        object.__setattr__(self, "_key", self.key)
        if not callable(self.cost):
            object.__setattr__(self, "cost", check_cost(self.cost))
        if self.methods is not None:
            if isinstance(self.methods, str) or not isinstance(self.methods, Iterable):
                raise TypeError(f"methods is a list of methods, not {self.methods!r}")
            methods = tuple(self.methods)
            for method in methods:
                if not isinstance(method, str) or not method:
                    raise TypeError(f"a method is a name such as 'POST', not {method!r}")
            object.__setattr__(self, "methods", frozenset(m.upper() for m in methods))
        if self.exempt is not None and not callable(self.exempt):
            raise TypeError(f"exempt is a test of a Request, not {self.exempt!r}")
        if not isinstance(self.shadow, bool):
            raise TypeError(f"shadow is True or False, not {self.shadow!r}")
        if self.scope is not None and (not isinstance(self.scope, str) or not self.scope):
            raise ValueError(f"a scope is a non-empty string, not {self.scope!r}")
        if isinstance(self.limit, Limit):
            limits: tuple[Limit | str, ...] = (self.limit,)
        else:
            limits = tuple(part.strip() for part in re.split(r"[;,]", self.limit) if part.strip())
        object.__setattr__(self, "_limits", limits)
        object.__setattr__(self, "_prefixes", {})
        judge = check_charging(self.charge_when, self.charge_statuses)
        if judge is not None and self.shadow:
            raise ValueError("a shadow limit counts every request: it is not charged by outcome")
        if self.charge_statuses is not None:
            object.__setattr__(self, "charge_statuses", frozenset(self.charge_statuses))
        object.__setattr__(self, "_judge", judge)

    @property
    def judge(self) -> Judge | None:
        """The test of the results this limit charges; None when it charges every request."""
        return self._judge

    @property
    def limits(self) -> tuple[Limit | str, ...]:
        """The single limits this one holds: ``"100/day; 10/minute"`` is two."""
        return self._limits

    @property
    def needs_body(self) -> bool:
        """Whether the key reads the request's body."""
        return self._key.needs_body

    def applies(self, request: Request) -> bool:
        """Whether ``request`` counts under this limit at all (method, exemption)."""
        if self.methods is not None and request.method not in self.methods:
            return False
        return self.exempt is None or not self.exempt(request)

    def counter(self, request: Request, scope: str) -> str | None:
        """The key ``request`` counts under, in ``scope`` unless this limit names its own;
        None when the key has no value for the request."""
        entries = self._key.entries(request)
        if entries is None:
            return None
        scope = self.scope or scope
        prefix = self._prefixes.get(scope)
        if prefix is None:
            if len(self._prefixes) >= MAX_PREFIXES:  # the routes of one app are few; bounded
                self._prefixes.clear()
            prefix = self._prefixes[scope] = descriptor_key((("scope", scope),))
        return bounded(f"{prefix}|{descriptor_key(entries)}")

    def cost_of(self, request: Request) -> int:
        """What ``request`` costs under this limit; a cost function's answer is checked here,
        before anything is counted (a bad one raises ``InvalidInputError``)."""
        cost = self.cost
        return check_cost(cost(request)) if callable(cost) else cost


#: What an adapter lets through unlimited: path patterns (``"/health"``, ``"/static/*"``) or a
#: test of the request.
ExemptLike = Iterable[str] | Callable[[Request], bool]


def exemption(exempt: ExemptLike) -> Callable[[Request], bool] | None:
    """``exempt`` as a test of a request, or None when nothing is exempt. A path pattern
    matches the whole path, ``*`` matching any run of characters (``fnmatch``)."""
    if callable(exempt):
        return exempt
    if isinstance(exempt, str) or not isinstance(exempt, Iterable):
        raise TypeError(f"exempt is a list of path patterns or a test of a Request, not {exempt!r}")
    patterns = tuple(exempt)
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern.startswith("/"):
            raise ValueError(f"an exempt path pattern starts with '/', not {pattern!r}")
    if not patterns:
        return None
    exact = frozenset(p for p in patterns if not any(c in p for c in "*?["))
    globs = tuple(p for p in patterns if p not in exact)
    return lambda request: (
        request.path in exact or any(fnmatchcase(request.path, glob) for glob in globs)
    )
