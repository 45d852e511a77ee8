"""Strict validation of one rule file's YAML tree, building its descriptor tree as it goes.

The walker reads PyYAML's composed nodes rather than constructed objects, so that it sees
duplicate keys, knows line numbers, and reads ``key``, ``value`` and ``name`` as the text
written (Envoy reads ``value: 200`` as the string ``"200"``). It never raises: every problem is
appended to ``errors`` as ``"<file>: <path>: <message>"``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ratekeeper.algorithms import Algorithm
from ratekeeper.errors import InvalidLimitError
from ratekeeper.limit import Limit
from ratekeeper.rates import parse_period
from ratekeeper.rules.model import (
    UNITS,
    Descriptor,
    KeyGroup,
    Level,
    Rule,
    path_part,
    wildcard_test,
)

TOP_FIELDS = ("domain", "descriptors")
DESCRIPTOR_FIELDS = ("key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric")
ENVOY_RATE_LIMIT_FIELDS = ("unit", "requests_per_unit", "unlimited", "name", "replaces")
EXTENSION_FIELDS = ("algorithm", "period", "burst", "granularity", "calendar")
RATE_LIMIT_FIELDS = ENVOY_RATE_LIMIT_FIELDS + EXTENSION_FIELDS

#: Nesting deeper than this is refused (it also stops a YAML alias that includes itself).
MAX_DEPTH = 32
#: Envoy's ``requests_per_unit`` is a uint32.
MAX_REQUESTS = 4_294_967_295

_TAG = "tag:yaml.org,2002:"
_UNIT_NAMES = ", ".join(UNITS)
_KINDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean"}


@dataclass
class Document:
    """What one file gave: its domain (``None`` when invalid), tree and rules in file order."""

    domain: str | None = None
    level: Level = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)


class Walker:
    """Validate one file's root node into a ``Document``; problems go to ``errors``."""

    def __init__(self, filename: str, constructor: SafeConstructor) -> None:
        self.filename = filename
        self.errors: list[str] = []
        self._constructor = constructor
        self._domain = ""
        self._rules: list[Rule] = []

    def error(self, path: str, message: str) -> None:
        where = f"{path}: " if path else ""
        self.errors.append(f"{self.filename}: {where}{message}")

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
        if node is None or _is_null(node):
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
            shadow = self.boolean(fields.get("shadow_mode"), f"{where}.shadow_mode")
            detailed = self.boolean(fields.get("detailed_metric"), f"{where}.detailed_metric")
            part = path_part(key or "", value)
            here = f"{rule_path}/{part}" if rule_path else part
            composite = f"{envoy_key}.{key or ''}" + (f"_{value}" if value is not None else "")
            rule = None
            if "rate_limit" in fields and not _is_null(fields["rate_limit"]):
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
        name = self.text(fields["name"], f"{path}.name") if "name" in fields else None
        replaces = self.replaces(fields.get("replaces"), f"{path}.replaces", name or None)
        # Fields set to null (or an empty unit, as Envoy reads it) count as not given.
        given = {k for k, v in fields.items() if not _is_null(v) and k != "replaces"}
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
            for other in ("unit", *EXTENSION_FIELDS):
                if other in given:
                    self.error(path, f"'{other}' cannot be combined with 'unlimited: true'")
            if len(self.errors) > before:
                return None
            return Rule(
                domain=self._domain,
                path=rule_path,
                limit=None,
                unlimited=True,
                name=name or None,
                replaces=replaces,
                shadow_mode=shadow,
                detailed_metric=detailed,
                unit=None,
                requests_per_unit=0,
            )
        period = self.period(fields.get("period"), f"{path}.period")
        if "unit" in given and "period" in given:
            self.error(path, "give either 'unit' or 'period', not both")
        elif "unit" not in given and "period" not in given:
            self.error(path, f"missing 'unit' (one of {_UNIT_NAMES}) or 'period'")
        amount = 0
        if "requests_per_unit" not in given:
            self.error(path, "missing 'requests_per_unit'")
        else:
            number = self.scalar(fields["requests_per_unit"])
            if type(number) is int and 1 <= number <= MAX_REQUESTS:
                amount = number
            else:
                self.error(
                    f"{path}.requests_per_unit",
                    f"expected a positive integer, got {describe(fields['requests_per_unit'])}",
                )
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
        seconds = UNITS[unit] if unit is not None else period
        try:
            limit = Limit(
                amount,
                seconds or 0.0,
                algorithm,
                burst=burst,
                granularity=granularity,
                calendar=calendar,
            )
        except InvalidLimitError as exc:
            self.error(path, str(exc))
            return None
        return Rule(
            domain=self._domain,
            path=rule_path,
            limit=limit,
            unlimited=False,
            name=name or None,
            replaces=replaces,
            shadow_mode=shadow,
            detailed_metric=detailed,
            unit=unit,
            requests_per_unit=amount,
        )

    def replaces(self, node: Node | None, path: str, own: str | None) -> tuple[str, ...]:
        if node is None or _is_null(node):
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

    def period(self, node: Node | None, path: str) -> float | None:
        """A period string (``"5m"``) or seconds; ``None`` when absent or invalid."""
        if node is None or _is_null(node):
            return None
        value = self.scalar(node)
        try:
            if isinstance(value, str):
                return parse_period(value)
            if type(value) in (int, float) and value > 0:
                return float(value)
        except InvalidLimitError as exc:
            self.error(path, str(exc))
            return None
        self.error(path, f"expected a period such as '5m' or seconds, got {describe(node)}")
        return None

    def fields(
        self, node: Node, path: str, allowed: tuple[str, ...], what: str
    ) -> dict[str, Node] | None:
        """The mapping's values by key, or ``None`` (reported) when ``node`` is no mapping."""
        if not isinstance(node, MappingNode):
            self.error(path, f"expected {what}, got {describe(node)}")
            return None
        own = {id(key) for key, _ in node.value}
        if any(key.tag == _TAG + "merge" for key, _ in node.value):
            try:
                self._constructor.flatten_mapping(node)
            except Exception as exc:  # yaml.constructor.ConstructorError
                self.error(path, f"invalid merge: {getattr(exc, 'problem', exc)}")
                return None
        result: dict[str, Node] = {}
        lines: dict[str, Node] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag != _TAG + "str":
                self.error(path, f"a key must be a string, got {describe(key_node)}")
                continue
            key = key_node.value
            where = f"{path}.{key}" if path else key
            if key in lines and id(key_node) in own and id(lines[key]) in own:
                first = lines[key].start_mark.line + 1
                line = key_node.start_mark.line + 1
                self.error(where, f"duplicate key (lines {first} and {line})")
                continue
            lines[key] = key_node
            if key not in allowed:
                self.error(where, unknown_key(key, allowed))
                continue
            result[key] = value_node
        return result

    def text(self, node: Node, path: str) -> str | None:
        """A scalar's text as written ("" for null); ``None`` (reported) for a list or map."""
        if not isinstance(node, ScalarNode):
            self.error(path, f"expected a string, got {describe(node)}")
            return None
        return "" if _is_null(node) else str(node.value)

    def boolean(self, node: Node | None, path: str) -> bool:
        if node is None or _is_null(node):
            return False
        if isinstance(node, ScalarNode) and node.tag == _TAG + "bool":
            return bool(self.scalar(node))
        self.error(path, f"expected true or false, got {describe(node)}")
        return False

    def scalar(self, node: Node) -> Any:
        """A scalar's value (int, float, bool, str by its tag); ``None`` for anything else."""
        if not isinstance(node, ScalarNode) or node.tag.removeprefix(_TAG) not in _KINDS:
            return None
        return self._constructor.construct_object(node)


def unknown_key(key: str, allowed: tuple[str, ...]) -> str:
    """The message for an unknown key, suggesting the closest allowed one."""
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown key '{key}'; did you mean '{close[0]}'?"
    return f"unknown key '{key}'; expected one of {', '.join(allowed)}"


def describe(node: Node) -> str:
    """How a message names a YAML value: ``a list``, ``an integer 5``, ``a string 'x'``."""
    if isinstance(node, SequenceNode):
        return "a list"
    if isinstance(node, MappingNode):
        return "a mapping"
    kind = node.tag.removeprefix(_TAG)
    if kind == "null":
        return "null"
    if kind == "str":
        return f"a string {node.value!r}"
    return f"{_KINDS.get(kind, 'a value')} {node.value}"


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _TAG + "null"


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
