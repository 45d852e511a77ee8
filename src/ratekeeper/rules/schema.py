"""The rule file schema: validate one file's YAML tree and build its descriptor tree."""

from __future__ import annotations

from functools import partial
from typing import Any

from yaml import YAMLError
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, SequenceNode

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.errors import InvalidLimitError
from ratekeeper.core.limits import SYNCS, Limit
from ratekeeper.core.networks import IPV4_BITS, IPV4_PREFIX, IPV6_BITS, IPV6_PREFIX, Prefixes
from ratekeeper.rules.model import (
    UNITS,
    Level,
    Rule,
    RuleNode,
    composed,
    path_part,
    wildcard_test,
)
from ratekeeper.rules.nodes import NodeReader, describe, is_null, shorten

TOP_FIELDS = ("domain", "descriptors")
DESCRIPTOR_FIELDS = (
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "ipv4_prefix",
    "ipv6_prefix",
)
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

#: Nesting deeper than this is refused (it also stops a YAML alias that includes itself).
MAX_DEPTH = 32
#: Envoy's ``requests_per_unit`` is a uint32.
MAX_REQUESTS = 4_294_967_295

_UNIT_NAMES = ", ".join(UNITS)


class Walker(NodeReader):
    """Validate one file's nodes into a descriptor tree and its rules; problems go to
    ``errors``.

    ``header`` reads the domain; ``tree`` then walks the descriptors into a level (a new one,
    or, when domains are merged, the level another file began) and returns the file's rules in
    file order.
    """

    def __init__(self, filename: str, constructor: SafeConstructor) -> None:
        super().__init__(filename, constructor)
        self._domain = ""
        self._rules: list[Rule] = []
        self._earlier: frozenset[str] = frozenset()
        self._limits: dict[tuple[Any, ...], Limit] = {}

    def header(self, root: Node | None) -> tuple[str | None, Node | None]:
        """The file's domain (``None`` when missing or invalid) and its ``descriptors`` node."""
        what = "a mapping with 'domain' and 'descriptors'"
        if root is None:
            self.error("", f"the file is empty; expected {what}")
            return None, None
        fields = self.fields(root, "", TOP_FIELDS, what)
        if fields is None:
            return None, None
        domain = None
        if "domain" not in fields:
            self.error("", "missing 'domain'")
        else:
            domain = self.text(fields["domain"], "domain")
            if domain == "":
                self.error("domain", "empty domain")
        self._domain = domain or ""
        return domain or None, fields.get("descriptors")

    def tree(self, node: Node | None, level: Level) -> list[Rule]:
        """Walk the top-level ``descriptors`` into ``level``; the rules found, in file order."""
        self._earlier = frozenset(level.nodes)  # from other files of a merged domain
        self.descriptors(node, "descriptors", level, envoy_key=self._domain, rule_path="", depth=1)
        return self._rules

    def descriptors(
        self,
        node: Node | None,
        path: str,
        level: Level,
        *,
        envoy_key: str,
        rule_path: str,
        depth: int,
    ) -> None:
        if node is None or is_null(node):
            return
        if depth > MAX_DEPTH:
            self.error(path, f"descriptors nested more than {MAX_DEPTH} levels deep")
            return
        if not isinstance(node, SequenceNode):
            self.error(path, f"expected a list of descriptors, got {describe(node)}")
            return
        for index, item in enumerate(node.value):
            where = f"{path}[{index}]"
            fields = self.fields(item, where, DESCRIPTOR_FIELDS, "a descriptor (a mapping)")
            if fields is None:
                continue
            key = None
            if "key" not in fields:
                self.error(where, "missing 'key'")
            else:
                key = self.text(fields["key"], f"{where}.key")
                if key == "":
                    self.error(f"{where}.key", "empty key")
                    key = None
            value = self.text(fields["value"], f"{where}.value") if "value" in fields else None
            value = value or None
            flags = {
                name: self.boolean(fields.get(name), f"{where}.{name}")
                for name in (
                    "shadow_mode",
                    "quota_mode",
                    "detailed_metric",
                    "value_to_metric",
                    "share_threshold",
                )
            }
            metadata = self.metadata(fields.get("metadata"), f"{where}.metadata")
            final = composed(key or "", value)
            composite = f"{envoy_key}.{final}"
            wildcard = "*" in final
            if flags["share_threshold"] and key is not None and not wildcard:
                self.error(
                    f"{where}.share_threshold",
                    "share_threshold applies only to a wildcard (a key or value with '*'), "
                    f"not to '{shorten(final)}'",
                )
            prefixes = self.prefixes(fields, where)
            if prefixes is not None and flags["share_threshold"]:
                self.error(
                    where,
                    "share_threshold counts every value under the pattern; it cannot be "
                    "combined with ipv4_prefix or ipv6_prefix",
                )
            part = path_part(key or "", value)
            here = f"{rule_path}/{part}" if rule_path else part
            rule = None
            if "rate_limit" in fields and not is_null(fields["rate_limit"]):
                limit_node, limit_path = fields["rate_limit"], f"{where}.rate_limit"
                rule = self.rate_limit(limit_node, limit_path, here, flags, metadata)
                if rule is not None:
                    self._rules.append(rule)
            children = Level()
            shared = final if flags["share_threshold"] and wildcard else None
            descriptor = RuleNode(rule, children, shared, self.filename, where, prefixes)
            nested = fields.get("descriptors")
            self.descriptors(
                nested,
                f"{where}.descriptors",
                children,
                envoy_key=composite,
                rule_path=here,
                depth=depth + 1,
            )
            if key is None:
                continue
            first = level.nodes.get(final)
            if first is not None:
                earlier = depth == 1 and final in self._earlier
                elsewhere = f"in {first.source} " if earlier else ""
                self.error(
                    where,
                    f"duplicate descriptor composite key '{shorten(composite)}' "
                    f"(already defined {elsewhere}at {first.where})",
                )
                continue
            level.nodes[final] = descriptor
            if wildcard:
                level.wildcards.append((wildcard_test(final), descriptor))

    def prefixes(self, fields: dict[str, Node], where: str) -> Prefixes | None:
        """The address blocks of a descriptor with ``ipv4_prefix`` or ``ipv6_prefix`` (the
        other one its default); None when it has neither, or either is invalid."""
        lengths: dict[str, int | None] = {}
        for name, bits in (("ipv4_prefix", IPV4_BITS), ("ipv6_prefix", IPV6_BITS)):
            node = fields.get(name)
            if node is not None and not is_null(node):
                lengths[name] = self.count(node, f"{where}.{name}", bits, 0)
        ipv4 = lengths.get("ipv4_prefix", IPV4_PREFIX)
        ipv6 = lengths.get("ipv6_prefix", IPV6_PREFIX)
        if not lengths or ipv4 is None or ipv6 is None:
            return None
        return Prefixes(ipv4, ipv6)

    def metadata(self, node: Node | None, path: str) -> dict[str, Any] | None:
        """The ``metadata`` mapping, constructed as written; ``None`` when absent or invalid."""
        if node is None or is_null(node):
            return None
        if not isinstance(node, MappingNode):
            self.error(path, f"expected a mapping, got {describe(node)}")
            return None
        try:
            data = self._constructor.construct_object(node, deep=True)
        except YAMLError as exc:
            problem = getattr(exc, "problem", None) or exc
            self.error(path, f"invalid metadata: {problem}")
            return None
        return dict(data)

    def rate_limit(
        self,
        node: Node,
        path: str,
        rule_path: str,
        flags: dict[str, bool],
        metadata: dict[str, Any] | None,
    ) -> Rule | None:
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
        unit = None
        if "unit" in given:
            raw = self.text(fields["unit"], f"{path}.unit")
            if raw == "":
                given.discard("unit")
            elif raw is not None:
                unit = raw.lower()
                if unit not in UNITS:
                    self.error(
                        f"{path}.unit",
                        f"invalid unit {shorten(raw)!r}; expected one of {_UNIT_NAMES}",
                    )
        if unlimited:
            for other in ("unit", "unit_multiplier", *EXTENSION_FIELDS):
                if other in given:
                    self.error(path, f"'{other}' cannot be combined with 'unlimited: true'")
            if len(self.errors) > before:
                return None
            return rule(limit=None, unlimited=True, unit=None, requests_per_unit=0)
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
        amount = 0
        if "requests_per_unit" not in given:
            self.error(path, "missing 'requests_per_unit'")
        else:
            path_amount = f"{path}.requests_per_unit"
            amount = self.count(fields["requests_per_unit"], path_amount, MAX_REQUESTS, 0) or 0
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
        if amount == 0:
            for other in COUNTING_FIELDS:
                if other in given:
                    self.error(
                        path,
                        f"'{other}' cannot be combined with 'requests_per_unit: 0' "
                        "(every hit is refused)",
                    )
        if len(self.errors) > before:
            return None
        if amount == 0:  # Envoy's "always over the limit": nothing to count
            return rule(limit=None, unlimited=False, unit=unit, requests_per_unit=0)
        seconds = UNITS[unit] * multiplier if unit is not None else period
        assert seconds is not None  # a missing unit or period was reported above
        parameters = (amount, seconds, algorithm, burst, granularity, calendar, debt, sync)
        limit = self._limits.get(parameters)
        if limit is None:
            try:
                limit = Limit(
                    amount,
                    seconds,
                    algorithm,
                    burst=burst,
                    granularity=granularity,
                    calendar=calendar,
                    debt=debt,
                    sync=sync,
                )
            except InvalidLimitError as exc:
                self.error(path, str(exc))
                return None
            self._limits[parameters] = limit  # equal limits are one object: a file repeats them
        return rule(limit=limit, unlimited=False, unit=unit, requests_per_unit=amount)

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
