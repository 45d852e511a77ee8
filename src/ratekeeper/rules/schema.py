"""The rule file schema: validate one file's YAML tree and build its descriptor tree."""

from __future__ import annotations

from typing import Any

from yaml import YAMLError
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, SequenceNode

from ratekeeper.core.networks import IPV4_BITS, IPV4_PREFIX, IPV6_BITS, IPV6_PREFIX, Prefixes
from ratekeeper.rules.model import Level, Rule, RuleNode, composed, path_part, wildcard_test
from ratekeeper.rules.nodes import describe, is_null, shorten
from ratekeeper.rules.rate_limits import (
    COUNTING_FIELDS,
    ENVOY_RATE_LIMIT_FIELDS,
    EXTENSION_FIELDS,
    MAX_REQUESTS,
    RATE_LIMIT_FIELDS,
    RateLimitReader,
)

__all__ = [
    "COUNTING_FIELDS",
    "DESCRIPTOR_FIELDS",
    "ENVOY_RATE_LIMIT_FIELDS",
    "EXTENSION_FIELDS",
    "FLAG_FIELDS",
    "MAX_DEPTH",
    "MAX_REQUESTS",
    "RATE_LIMIT_FIELDS",
    "TOP_FIELDS",
    "Walker",
]

TOP_FIELDS = ("domain", "descriptors")
#: A descriptor's flags: each true or false, false when absent.
FLAG_FIELDS = (
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
)
DESCRIPTOR_FIELDS = (
    "key",
    "value",
    "rate_limit",
    "descriptors",
    *FLAG_FIELDS,
    "metadata",
    "ipv4_prefix",
    "ipv6_prefix",
)

#: Nesting deeper than this is refused (it also stops a YAML alias that includes itself).
MAX_DEPTH = 32


class Walker(RateLimitReader):
    """Validate one file's nodes into a descriptor tree and its rules; problems go to
    ``errors``.

    ``header`` reads the domain; ``tree`` then walks the descriptors into a level (a new one,
    or, when domains are merged, the level another file began) and returns the file's rules in
    file order. Each descriptor's ``rate_limit`` is read by ``RateLimitReader``.
    """

    def __init__(self, filename: str, constructor: SafeConstructor) -> None:
        super().__init__(filename, constructor)
        self._rules: list[Rule] = []
        self._earlier: frozenset[str] = frozenset()

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
        """The list of descriptors at ``path``, each into ``level``."""
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
            self.descriptor(
                item, where, level, envoy_key=envoy_key, rule_path=rule_path, depth=depth
            )

    def descriptor(
        self,
        item: Node,
        where: str,
        level: Level,
        *,
        envoy_key: str,
        rule_path: str,
        depth: int,
    ) -> None:
        """One descriptor: its rule, its nested descriptors, then its place in ``level``."""
        fields = self.fields(item, where, DESCRIPTOR_FIELDS, "a descriptor (a mapping)")
        if fields is None:
            return
        key = self.key(fields, where)
        value = self.text(fields["value"], f"{where}.value") if "value" in fields else None
        value = value or None
        flags = {name: self.boolean(fields.get(name), f"{where}.{name}") for name in FLAG_FIELDS}
        metadata = self.metadata(fields.get("metadata"), f"{where}.metadata")
        final = composed(key or "", value)
        composite = f"{envoy_key}.{final}"
        wildcard = "*" in final
        prefixes = self.grouping(fields, where, key, final, flags["share_threshold"])
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
        descriptor.value_to_metric = flags["value_to_metric"]
        nested = fields.get("descriptors")
        self.descriptors(
            nested,
            f"{where}.descriptors",
            children,
            envoy_key=composite,
            rule_path=here,
            depth=depth + 1,
        )
        if key is not None:
            self.place(descriptor, level, final, composite, depth)

    def key(self, fields: dict[str, Node], where: str) -> str | None:
        """The descriptor's ``key``; None when missing or invalid (reported)."""
        if "key" not in fields:
            self.error(where, "missing 'key'")
            return None
        key = self.text(fields["key"], f"{where}.key")
        if key == "":
            self.error(f"{where}.key", "empty key")
            return None
        return key

    def grouping(
        self, fields: dict[str, Node], where: str, key: str | None, final: str, share: bool
    ) -> Prefixes | None:
        """The descriptor's address blocks (``prefixes``), checked against ``share_threshold``:
        a threshold shared under a wildcard counts every value, so it needs a wildcard and
        takes no address blocks."""
        if share and key is not None and "*" not in final:
            self.error(
                f"{where}.share_threshold",
                "share_threshold applies only to a wildcard (a key or value with '*'), "
                f"not to '{shorten(final)}'",
            )
        prefixes = self.prefixes(fields, where)
        if prefixes is not None and share:
            self.error(
                where,
                "share_threshold counts every value under the pattern; it cannot be "
                "combined with ipv4_prefix or ipv6_prefix",
            )
        return prefixes

    def place(
        self, descriptor: RuleNode, level: Level, final: str, composite: str, depth: int
    ) -> None:
        """``descriptor`` into ``level`` under ``final``, unless one is there already."""
        first = level.nodes.get(final)
        if first is not None:
            earlier = depth == 1 and final in self._earlier
            elsewhere = f"in {first.source} " if earlier else ""
            self.error(
                descriptor.where,
                f"duplicate descriptor composite key '{shorten(composite)}' "
                f"(already defined {elsewhere}at {first.where})",
            )
            return
        level.nodes[final] = descriptor
        if "*" in final:
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
