"""What ``Engine`` and ``AsyncEngine`` share: their arguments, checked, and ``EngineBase``.

``EngineBase`` holds the rules, the configuration store, the plan cache and the rule watcher,
and starts and stops their background work (the lifecycle ``engines`` describes). It does no
I/O on the request store: the twins do, each in its own way.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import ConfigError, InvalidLimitError
from ratekeeper.core.forks import renew_after_fork
from ratekeeper.core.inputs import check_key, check_text
from ratekeeper.core.limits import Limit, with_debt
from ratekeeper.core.rates import cached
from ratekeeper.core.store_keys import identity
from ratekeeper.engine.plans import Plan, Planner, Request
from ratekeeper.engine.reload import RuleWatcher
from ratekeeper.engine.statuses import status
from ratekeeper.engine.verdict import Descriptor, Observer, Status, Tally

if TYPE_CHECKING:
    from ratekeeper.config import ConfigStore
    from ratekeeper.rules import RuleSet
    from ratekeeper.stores import AsyncStore, Store


def _rules(rules: Any, merge_domains: bool) -> tuple[RuleSet, list[str | os.PathLike[str]]]:
    """The rule set to start with, and the files to watch (none for a given ``RuleSet``)."""
    from ratekeeper.rules import RuleSet, load_rules

    if rules is None:
        return RuleSet.empty(), []
    if isinstance(rules, RuleSet):
        return rules, []
    paths = [rules] if isinstance(rules, str | os.PathLike) else _paths(rules)
    return load_rules(paths, merge_domains=merge_domains), paths


def _paths(rules: Any) -> list[str | os.PathLike[str]]:
    """Rule files and directories, listed; ``ConfigError`` for anything else."""
    paths = list(rules) if isinstance(rules, Iterable) else [rules]
    if not all(isinstance(path, str | os.PathLike) for path in paths):
        raise ConfigError(f"rules are a RuleSet, or rule files and directories, not {rules!r}")
    return paths


def _config(config: ConfigStore | str | None) -> ConfigStore | None:
    if isinstance(config, str):
        from ratekeeper.config import open_config_store

        return open_config_store(config)
    return config


def _default(default: Limit | str | None) -> Limit | None:
    if default is None:
        return None
    return _one(default, "the default limit")


def _one(limit: Limit | str, what: str) -> Limit:
    """A ``Limit``, or a rate string holding exactly one (``InvalidLimitError`` otherwise)."""
    if isinstance(limit, Limit):
        return limit
    if not isinstance(limit, str):
        raise InvalidLimitError(
            f"{what} is a Limit or a rate string such as '10/minute', not {limit!r}"
        )
    limits = cached(limit)
    if len(limits) != 1:
        raise InvalidLimitError(f"{what} must be one limit, not {limit!r}")
    return limits[0]


def _check_options(
    cache_size: Any, cache_ttl: Any, reload_interval: Any, switches: dict[str, Any]
) -> None:
    """``ConfigError`` unless ``cache_size`` is a positive integer, ``cache_ttl`` and
    ``reload_interval`` (unless None) positive finite seconds, and each of ``switches`` a
    bool."""
    for name, value in switches.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be True or False, not {value!r}")
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
        raise ConfigError(f"cache_size must be an integer of at least 1, not {cache_size!r}")
    for name, seconds in (("cache_ttl", cache_ttl), ("reload_interval", reload_interval)):
        if seconds is None and name == "reload_interval":
            continue
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 < seconds < math.inf
        ):
            raise ConfigError(f"{name} must be positive finite seconds, not {seconds!r}")


class EngineBase:
    """What the twins share: the rules, the configuration store, the plan cache, the watcher,
    and their lifecycle."""

    _memory: Callable[[], Any]
    _open: Callable[[str], Any]

    def __init__(
        self,
        store: Store | AsyncStore | str | None = None,
        *,
        rules: RuleSet | str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None = None,
        config: ConfigStore | str | None = None,
        default: Limit | str | None = None,
        domain: str = "",
        cache_size: int = 100_000,
        cache_ttl: float = 60.0,
        reload_interval: float | None = 1.0,
        clock: Callable[[], float] = time.monotonic,
        observer: Observer | None = None,
        shadow: bool = False,
        merge_domains: bool = False,
        debt: bool = False,
        quota_mode: bool = False,
    ) -> None:
        domain = check_text(domain, "domain")
        switches = {
            "shadow": shadow,
            "merge_domains": merge_domains,
            "debt": debt,
            "quota_mode": quota_mode,
        }
        _check_options(cache_size, cache_ttl, reload_interval, switches)
        ruleset, paths = _rules(rules, merge_domains)
        if store is None or isinstance(store, str):
            opened = type(self)._memory() if store is None else type(self)._open(store)
        else:
            opened = store
        self.config = _config(config)
        self.planner = Planner(
            ruleset,
            config=self.config,
            default=_default(default),
            domain=domain,
            cache_size=cache_size,
            cache_ttl=cache_ttl,
            clock=clock,
        )
        self.planner.debt = debt  # every limit the engine applies counts every hit
        self.watcher = RuleWatcher(
            paths,
            self.planner.set_rules,
            reload_interval or 1.0,
            merge_domains=merge_domains,
            loaded=len(ruleset),
        )
        self._watching = bool(paths) and reload_interval is not None
        self.store = opened
        self._apply = opened.apply
        self.observer = observer
        self._tally: Tally | None = None
        #: Every refusal of ``check`` is let through and marked ``shadowed``.
        self.shadow = shadow
        #: Every descriptor of ``check`` is in quota mode, whatever its rule says.
        self.quota_mode = quota_mode
        cache = self.planner.cache
        self._lookup = cache.lookup
        self._block = self.planner.blocks.get
        self._lock = threading.Lock()
        self._running = False  # started in this process
        self._closed = False
        renew_after_fork(self)

    def start(self) -> None:
        """Start the background work now rather than at the first decision: reloading the
        rule files, and following the configuration store. Does nothing while it runs.

        Raises ``RuntimeError`` once closed.
        """
        if not self._start_unless_closed():
            raise RuntimeError("this engine is closed")

    def _start_unless_closed(self) -> bool:
        """``start()``, as the first decision calls it; False (and nothing started) once closed."""
        with self._lock:
            if self._closed:
                return False
            if not self._running:
                if self._watching:
                    self.watcher.start()
                self.planner.start()
                self._running = True
            return True

    def _load_key(self, key: str) -> Plan:
        """The plan of ``key``, on a cache miss: the first one starts the engine."""
        if not self._running:
            self._start_unless_closed()
        return self.planner.load_key(key)

    def _after_fork(self) -> None:
        # A forked child: no thread survived. Empty the plan cache so that the first decision
        # misses it and starts the engine again.
        self._lock = threading.Lock()
        self._running = False
        self.planner.cache.expire()

    def _single(self, domain: str, descriptors: Sequence[Any]) -> Plan | None:
        """The cached plan of a check's only descriptor, or None: the general path decides.

        The plan cache's ``get``, inlined as in ``decide``: this is ``check``'s hot path, for
        entries given as a list or tuple of ``(key, value)`` tuples, then the plan of their
        address's block, if the planner knows it. A ``Descriptor``, or entries that are lists,
        take the general path.
        """
        entries = descriptors[0]
        if entries.__class__ is list:
            entries = tuple(entries)
        elif entries.__class__ is not tuple:
            return None
        slot = (domain, entries)
        try:
            plan = self._lookup(slot)
            if plan is None:  # planned by its address's block, if it holds one
                block = self._block(slot)
                if block is not None:
                    plan = self._lookup(block)
            return plan
        except TypeError:  # unhashable: entries given as lists
            return None

    def _given(self, key: str, limit: Limit | str) -> tuple[str, Limit]:
        """The identity and limit of ``hit(key, limit)``: ``key`` in the engine's domain, as
        ``decide`` counts it, so that a limit equal to the key's override shares its counter."""
        if key.__class__ is not str or not key.isascii() or not key:
            key = check_key(key)
        if limit.__class__ is not Limit:
            limit = _one(limit, "a hit's limit")
        if self.planner.debt:
            limit = with_debt(limit)
        return identity(self.planner.domain, key), limit

    def _tell(self, domain: str, statuses: tuple[Status, ...], asked: list[Request]) -> None:
        """Tell the observer of a check's decisions: the statuses of the descriptors that
        counted, if any (a descriptor of cost 0 only looked, which is no decision)."""
        observer = self.observer
        if observer is None:
            return
        for _, _, cost in asked:
            if not cost:
                break
        else:
            observer(domain, statuses)
            return
        counted = tuple(one for one, (_, _, cost) in zip(statuses, asked, strict=True) if cost)
        if counted:
            observer(domain, counted)

    @property
    def tally(self) -> Tally | None:
        """Told of every ``check`` that counted, with its descriptors (``Tally``); None by
        default. Set, it wraps this engine's ``check`` (``_tallied``), so that an engine
        without one decides exactly as before, at no cost."""
        return self._tally

    @tally.setter
    def tally(self, tally: Tally | None) -> None:
        self._tally = tally
        if tally is None:
            self.__dict__.pop("check", None)
        else:
            self.check = self._tallied  # type: ignore[attr-defined]

    def _tell_tally(
        self,
        domain: str,
        descriptors: Sequence[Any],
        hits: int,
        statuses: tuple[Status, ...],
    ) -> None:
        """Tell the tally of a check that was decided: its descriptors as ``(entries, limit,
        cost)``, checked by then, and their statuses, those of cost 0 left out (a look)."""
        tally = self._tally
        if tally is None:
            return
        asked: list[Request] = []
        told: list[Status] = []
        for descriptor, one in zip(descriptors, statuses, strict=True):
            if isinstance(descriptor, Descriptor):
                entries, limit, cost = descriptor
                cost = hits if cost is None else cost
            else:
                entries, limit, cost = descriptor, None, hits
            if cost:
                asked.append((tuple((key, value) for key, value in entries), limit, cost))
                told.append(one)
        if asked:
            tally(domain, asked, tuple(told))

    def _observe(self, domain: str, plan: Plan, decision: Decision | None) -> None:
        observer = self.observer
        if observer is not None:
            observer(domain, (status(plan, decision),))

    @property
    def rules(self) -> RuleSet:
        """The rules in force."""
        return self.planner.rules

    def reload(self) -> bool:
        """Reload the rule files now if they changed; False when unchanged or invalid."""
        return self.watcher.check()
