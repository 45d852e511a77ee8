"""The rule file schema: validate one file's YAML tree and build its descriptor tree."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from yaml.constructor import SafeConstructor
from yaml.nodes import Node, SequenceNode

from ratekeeper.algorithms import Algorithm
from ratekeeper.errors import InvalidLimitError
from ratekeeper.limit import Limit
from ratekeeper.rules.model import (
    UNITS,
    Descriptor,
    KeyGroup,
    Level,
    Rule,
    path_part,
    wildcard_test,
)
from ratekeeper.rules.nodes import NodeReader, describe, is_null

TOP_FIELDS = ("domain", "descriptors")
DESCRIPTOR_FIELDS = ("key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric")
ENVOY_RATE_LIMIT_FIELDS = (
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "unit_multiplier",
)
#: Fields of newer Envoy rate-limit services that change counting or metrics in ways ratekeeper
#: does not implement; refused by name rather than silently ignored.
UNSUPPORTED_DESCRIPTOR_FIELDS = ("share_threshold", "value_to_metric")
EXTENSION_FIELDS = ("algorithm", "period", "burst", "granularity", "calendar")
RATE_LIMIT_FIELDS = ENVOY_RATE_LIMIT_FIELDS + EXTENSION_FIELDS

#: Nesting deeper than this is refused (it also stops a YAML alias that includes itself).
MAX_DEPTH = 32
#: Envoy's ``requests_per_unit`` is a uint32.
MAX_REQUESTS = 4_294_967_295

_UNIT_NAMES = ", ".join(UNITS)


@dataclass
class Document:
    """What one file gave: its domain (``None`` when invalid), tree and rules in file order."""

    domain: str | None = None
    level: Level = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)


class Walker(NodeReader):
    """Validate one file's root node into a ``Document``; problems go to ``errors``."""

    def __init__(self, filename: str, constructor: SafeConstructor) -> None:
        super().__init__(filename, constructor)
        self._domain = ""
        self._rules: list[Rule] = []

    def document(self, root: Node | None) -> Document:
        what = "a mapping with 'domain' and 'descriptors'"
        if root is None:
            self.error("", f"the file is empty; expected {what}")
            return Document()
        fields = self.fields(root, "", TOP_FIELDS, what)
        if fields is None:
            return Document()
        domain = None
        if "domain" not in fields:
            self.error("", "missing 'domain'")
        else:
            domain = self.text(fields["domain"], "domain")
            if domain == "":
                self.error("domain", "empty domain")
        self._domain = domain or ""
        level: Level = {}
        nested = fields.get("descriptors")
        self.descriptors(
            nested, "descriptors", level, envoy_key=self._domain, rule_path="", depth=1
        )
        return Document(domain or None, level, self._rules)

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
        seen: dict[tuple[str, str | None], str] = {}
        for index, item in enumerate(node.value):
            where = f"{path}[{index}]"
            fields = self.fields(
                item,
                where,
                DESCRIPTOR_FIELDS,
                "a descriptor (a mapping)",
                unsupported=UNSUPPORTED_DESCRIPTOR_FIELDS,
            )
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
            shadow = self.boolean(fields.get("shadow_mode"), f"{where}.shadow_mode")
            detailed = self.boolean(fields.get("detailed_metric"), f"{where}.detailed_metric")
            part = path_part(key or "", value)
            here = f"{rule_path}/{part}" if rule_path else part
            composite = f"{envoy_key}.{key or ''}" + (f"_{value}" if value is not None else "")
            rule = None
            if "rate_limit" in fields and not is_null(fields["rate_limit"]):
                limit_node, limit_path = fields["rate_limit"], f"{where}.rate_limit"
                rule = self.rate_limit(limit_node, limit_path, here, shadow, detailed)
                if rule is not None:
                    self._rules.append(rule)
            children: Level = {}
            descriptor = Descriptor(rule, children)
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
            if (key, value) in seen:
                self.error(
                    where,
                    f"duplicate descriptor composite key '{composite}' "
                    f"(already defined at {seen[key, value]})",
                )
                continue
            seen[key, value] = where
            _insert(level, key, value, descriptor)

    def rate_limit(
        self, node: Node, path: str, rule_path: str, shadow: bool, detailed: bool
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
            shadow_mode=shadow,
            detailed_metric=detailed,
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
                        f"{path}.unit", f"invalid unit {raw!r}; expected one of {_UNIT_NAMES}"
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
            given_multiplier = self.count(fields["unit_multiplier"], f"{path}.unit_multiplier")
            if given_multiplier is not None:
                multiplier = given_multiplier
                if "period" in given:
                    self.error(path, "'unit_multiplier' applies to 'unit', not to 'period'")
        amount = 0
        if "requests_per_unit" not in given:
            self.error(path, "missing 'requests_per_unit'")
        else:
            path_amount = f"{path}.requests_per_unit"
            amount = self.count(fields["requests_per_unit"], path_amount, MAX_REQUESTS) or 0
        algorithm = Algorithm.FIXED_WINDOW
        if "algorithm" in given:
            raw = self.text(fields["algorithm"], f"{path}.algorithm")
            try:
                algorithm = Algorithm(raw or "")
            except ValueError:
                if raw is not None:
                    names = ", ".join(a.value for a in Algorithm)
                    self.error(
                        f"{path}.algorithm", f"unknown algorithm {raw!r}; expected one of {names}"
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
        if len(self.errors) > before:
            return None
        seconds = UNITS[unit] * multiplier if unit is not None else period
        assert seconds is not None  # a missing unit or period was reported above
        try:
            limit = Limit(
                amount,
                seconds,
                algorithm,
                burst=burst,
                granularity=granularity,
                calendar=calendar,
            )
        except InvalidLimitError as exc:
            self.error(path, str(exc))
            return None
        return rule(limit=limit, unlimited=False, unit=unit, requests_per_unit=amount)

    def count(self, node: Node, path: str, maximum: int | None = None) -> int | None:
        """A positive integer (at most ``maximum``); else an error at ``path``, and None."""
        number = self.scalar(node)
        if type(number) is int and number >= 1 and (maximum is None or number <= maximum):
            return number
        self.error(path, f"expected a positive integer, got {describe(node)}")
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
                self.error(f"{where}.name", f"a rule cannot replace itself ('{name}' is its name)")
            elif name is not None:
                names.append(name)
        return tuple(names)


def _insert(level: Level, key: str, value: str | None, descriptor: Descriptor) -> None:
    group = level.get(key)
    if group is None:
        group = level[key] = KeyGroup()
    if value is None:
        group.bare = descriptor
    elif "*" in value:
        group.wildcards = (*group.wildcards, (wildcard_test(value), descriptor))
    else:
        group.exact[value] = descriptor
