"""A descriptor's ``rate_limit`` mapping: Envoy's fields and ratekeeper's extensions, read into
one rule."""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

from yaml.constructor import SafeConstructor
from yaml.nodes import Node, SequenceNode

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.errors import InvalidLimitError
from ratekeeper.core.limits import SYNCS, Limit
from ratekeeper.rules.model import UNITS, Rule
from ratekeeper.rules.nodes import NodeReader, describe, is_null, shorten

ENVOY_RATE_LIMIT_FIELDS = (
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "unit_multiplier",
)
EXTENSION_FIELDS = ("algorithm", "period", "burst", "granularity", "calendar", "debt", "sync")
RATE_LIMIT_FIELDS = ENVOY_RATE_LIMIT_FIELDS + EXTENSION_FIELDS
#: Extensions that shape how a limit counts, so meaningless where nothing is counted.
COUNTING_FIELDS = ("algorithm", "burst", "granularity", "calendar", "debt", "sync")

#: Envoy's ``requests_per_unit`` is a uint32.
MAX_REQUESTS = 4_294_967_295

_UNIT_NAMES = ", ".join(UNITS)
#: The two rate limits that count nothing, each refusing the fields that shape a count.
UNLIMITED = "'unlimited: true'"
REFUSED = "'requests_per_unit: 0' (every hit is refused)"


class Counting(NamedTuple):
    """How a limit counts, beyond its amount and period: the extensions, as ``Limit`` takes
    them."""

    algorithm: Algorithm
    burst: Any
    granularity: float | None
    calendar: bool
    debt: bool
    sync: str


class RateLimitReader(NodeReader):
    """Reads ``rate_limit`` mappings into rules of one domain; problems go to ``errors``.
    Equal limits in one file are one object."""

    def __init__(self, filename: str, constructor: SafeConstructor) -> None:
        super().__init__(filename, constructor)
        self._domain = ""
        self._limits: dict[tuple[Any, ...], Limit] = {}

    def rate_limit(
        self,
        node: Node,
        path: str,
        rule_path: str,
        flags: dict[str, bool],
        metadata: dict[str, Any] | None,
    ) -> Rule | None:
        """The rule of the descriptor at ``rule_path``; None when ``node`` has a problem."""
        fields = self.fields(node, path, RATE_LIMIT_FIELDS, "a rate_limit mapping")
        if fields is None:
            return None
        before = len(self.errors)
        unlimited = self.boolean(fields.get("unlimited"), f"{path}.unlimited")
        name = (self.text(fields["name"], f"{path}.name") if "name" in fields else None) or None
        replaces = self.replaces(fields.get("replaces"), f"{path}.replaces", name)
        rule = partial(
            Rule,
            domain=self._domain,
            path=rule_path,
            name=name,
            replaces=replaces,
            shadow_mode=flags["shadow_mode"],
            detailed_metric=flags["detailed_metric"],
            quota_mode=flags["quota_mode"],
            metadata=metadata,
        )
        # Fields set to null (or an empty unit, as Envoy reads it) count as not given.
        given = {k for k, v in fields.items() if not is_null(v) and k != "replaces"}
        unit = self.unit(fields, given, path)
        if unlimited:
            self.exclusive(path, given, ("unit", "unit_multiplier", *EXTENSION_FIELDS), UNLIMITED)
            if len(self.errors) > before:
                return None
            return rule(limit=None, unlimited=True, unit=None, requests_per_unit=0)
        seconds = self.seconds(fields, given, path, unit)
        amount = 0
        if "requests_per_unit" not in given:
            self.error(path, "missing 'requests_per_unit'")
        else:
            path_amount = f"{path}.requests_per_unit"
            amount = self.count(fields["requests_per_unit"], path_amount, MAX_REQUESTS, 0) or 0
        counting = self.counting(fields, given, path)
        if amount == 0:
            self.exclusive(path, given, COUNTING_FIELDS, REFUSED)
        if len(self.errors) > before:
            return None
        if amount == 0:  # Envoy's "always over the limit": nothing to count
            return rule(limit=None, unlimited=False, unit=unit, requests_per_unit=0)
        assert seconds is not None  # a missing unit or period was reported above
        limit = self.limit(amount, seconds, counting, path)
        if limit is None:
            return None
        return rule(limit=limit, unlimited=False, unit=unit, requests_per_unit=amount)

    def exclusive(self, path: str, given: set[str], others: tuple[str, ...], what: str) -> None:
        """An error for each field of ``others`` given beside ``what``."""
        for other in others:
            if other in given:
                self.error(path, f"'{other}' cannot be combined with {what}")

    def unit(self, fields: dict[str, Node], given: set[str], path: str) -> str | None:
        """The ``unit``, lowercase; None when absent or invalid. An empty unit is not given."""
        if "unit" not in given:
            return None
        raw = self.text(fields["unit"], f"{path}.unit")
        if raw == "":
            given.discard("unit")
            return None
        if raw is None:
            return None
        unit = raw.lower()
        if unit not in UNITS:
            self.error(
                f"{path}.unit", f"invalid unit {shorten(raw)!r}; expected one of {_UNIT_NAMES}"
            )
        return unit

    def seconds(
        self, fields: dict[str, Node], given: set[str], path: str, unit: str | None
    ) -> float | None:
        """The limit's period: ``unit`` times ``unit_multiplier``, or ``period``; exactly one
        of ``unit`` and ``period``."""
        period = self.period(fields.get("period"), f"{path}.period")
        if "unit" in given and "period" in given:
            self.error(path, "give either 'unit' or 'period', not both")
        elif "unit" not in given and "period" not in given:
            self.error(path, f"missing 'unit' (one of {_UNIT_NAMES}) or 'period'")
        multiplier = 1
        if "unit_multiplier" in given:
            given_multiplier = self.count(
                fields["unit_multiplier"], f"{path}.unit_multiplier", MAX_REQUESTS
            )
            if given_multiplier is not None:
                multiplier = given_multiplier
                if "period" in given:
                    self.error(path, "'unit_multiplier' applies to 'unit', not to 'period'")
        if unit is not None and unit in UNITS:
            return UNITS[unit] * multiplier
        return period

    def counting(self, fields: dict[str, Node], given: set[str], path: str) -> Counting:
        """The extensions that shape how the limit counts (``COUNTING_FIELDS``)."""
        algorithm = Algorithm.FIXED_WINDOW
        if "algorithm" in given:
            raw = self.text(fields["algorithm"], f"{path}.algorithm")
            try:
                algorithm = Algorithm(raw or "")
            except ValueError:
                if raw is not None:
                    names = ", ".join(a.value for a in Algorithm)
                    self.error(
                        f"{path}.algorithm",
                        f"unknown algorithm {shorten(raw)!r}; expected one of {names}",
                    )
        burst = None
        if "burst" in given:
            burst = self.scalar(fields["burst"])
            if type(burst) is not int:
                self.error(
                    f"{path}.burst", f"expected a positive integer, got {describe(fields['burst'])}"
                )
        granularity = self.period(fields.get("granularity"), f"{path}.granularity")
        calendar = self.boolean(fields.get("calendar"), f"{path}.calendar")
        debt = self.boolean(fields.get("debt"), f"{path}.debt")
        sync = "exact"
        if "sync" in given:
            raw_sync = self.text(fields["sync"], f"{path}.sync")
            if raw_sync in SYNCS:
                sync = raw_sync
            elif raw_sync is not None:
                self.error(
                    f"{path}.sync", f"expected 'exact' or 'leased', got {shorten(raw_sync)!r}"
                )
        return Counting(algorithm, burst, granularity, calendar, debt, sync)

    def limit(self, amount: int, seconds: float, counting: Counting, path: str) -> Limit | None:
        """The ``Limit``, the same object for equal parameters; None when ``Limit`` refuses
        them (reported)."""
        parameters = (amount, seconds, *counting)
        limit = self._limits.get(parameters)
        if limit is None:
            try:
                limit = Limit(amount, seconds, **counting._asdict())
            except InvalidLimitError as exc:
                self.error(path, str(exc))
                return None
            self._limits[parameters] = limit  # equal limits are one object: a file repeats them
        return limit

    def count(self, node: Node, path: str, maximum: int, minimum: int = 1) -> int | None:
        """An integer from ``minimum`` to ``maximum``; else an error at ``path``, and None."""
        number = self.scalar(node)
        if type(number) is int and minimum <= number <= maximum:
            return number
        expected = "a positive integer" if minimum == 1 else f"an integer from {minimum}"
        self.error(path, f"expected {expected} up to {maximum}, got {describe(node)}")
        return None

    def replaces(self, node: Node | None, path: str, own: str | None) -> tuple[str, ...]:
        if node is None or is_null(node):
            return ()
        if not isinstance(node, SequenceNode):
            self.error(path, f"expected a list of {{name: ...}} entries, got {describe(node)}")
            return ()
        names = []
        for index, item in enumerate(node.value):
            where = f"{path}[{index}]"
            fields = self.fields(item, where, ("name",), "a replaces entry (a mapping with 'name')")
            if fields is None:
                continue
            if "name" not in fields:
                self.error(where, "replaces entry without 'name'")
                continue
            name = self.text(fields["name"], f"{where}.name")
            if name == "":
                self.error(f"{where}.name", "empty name in replaces entry")
            elif name is not None and name == own:
                self.error(
                    f"{where}.name", f"a rule cannot replace itself ('{shorten(name)}' is its name)"
                )
            elif name is not None:
                names.append(name)
        return tuple(names)
