"""A loaded set of rules, and how a request's descriptors find their rule."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType

from ratekeeper.core.wording import many
from ratekeeper.rules.model import Entry, Level, Rule


class RuleSet:
    """The rules of one or more rule files, by domain; immutable and safe to share between threads.

    ``domains`` maps each domain to the top level of its descriptor tree; ``sources`` names the
    files loaded, in load order. ``len()`` is the number of rules (``rate_limit`` entries) and
    iterating yields them in file order. Build one with ``load_rules`` or ``parse_rules``.
    """

    __slots__ = ("_domains", "_rules", "domains", "sources")

    domains: Mapping[str, Level]
    sources: tuple[str, ...]

    def __init__(
        self, domains: dict[str, Level], sources: Sequence[str], rules: Sequence[Rule]
    ) -> None:
        self._domains = domains
        self._rules = tuple(rules)
        self.domains = MappingProxyType(domains)
        self.sources = tuple(sources)

    @classmethod
    def empty(cls) -> RuleSet:
        """A rule set with no domains: every ``match`` answers ``None``."""
        return cls({}, (), ())

    def __len__(self) -> int:
        return len(self._rules)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._rules)

    def __repr__(self) -> str:
        return f"<RuleSet {many(len(self._rules), 'rule')} in {many(len(self._domains), 'domain')}>"

    def match(self, domain: str, entries: Sequence[Entry]) -> Rule | None:
        """Return the rule for one request descriptor, or ``None`` when no limit applies.

        ``entries`` are the descriptor's ``(key, value)`` pairs. Envoy's rate-limit service
        semantics: walk the tree level by level, composing each entry as ``key_value``; at each
        level take the descriptor whose composed key (``key_value``, or ``key`` without a value)
        is exactly that, else the first one in file order whose wildcard matches it, else the
        one whose composed key is the entry's bare ``key``. A rule applies only when found at
        the last entry. ``None`` when the domain is unknown, a level has no match, the request
        is deeper or shallower than the rule, or the matched descriptor has no ``rate_limit``
        (a whitelist). Example::

            rules.match("api", [("generic_key", "default"), ("user", "alice")])
        """
        return self.lookup(domain, entries)[0]

    def lookup(self, domain: str, entries: Sequence[Entry]) -> tuple[Rule | None, Sequence[Entry]]:
        """``match``, and the entries the matched rule counts this descriptor under.

        Those are ``entries`` themselves (the same object), except where a level matched a
        wildcard descriptor with ``share_threshold``: there the wildcard pattern stands for the
        value, so that every value it matches shares one counter, as in Envoy's service; and
        where a level matched a descriptor with ``ipv4_prefix`` or ``ipv6_prefix``: there the
        address's block stands for it (``2001:db8:1:2::/64``), so that every address of one
        block shares one counter.
        """
        rule, counted, _ = self.locate(domain, entries)
        return rule, counted

    def locate(
        self, domain: str, entries: Sequence[Entry]
    ) -> tuple[Rule | None, Sequence[Entry], Sequence[Entry]]:
        """``lookup``, and the entries with only their addresses as blocks: ``entries`` itself
        (the same object) unless a level with ``ipv4_prefix`` or ``ipv6_prefix`` matched an
        address outside its block's canonical form. The engine keys a plan, and looks up its
        override, by those: every address of one block has one plan, as it has one counter."""
        level = self._domains.get(domain)
        if level is None:
            return None, entries, entries
        shared: dict[int, str] | None = None
        blocks: dict[int, str] | None = None
        last = len(entries) - 1
        for index, (key, value) in enumerate(entries):
            nodes = level.nodes
            final = f"{key}_{value}"
            node = nodes.get(final)
            if node is None:
                for test, candidate in level.wildcards:
                    if test(final):
                        node = candidate
                        if candidate.shared is not None:
                            shared = shared or {}
                            shared[index] = candidate.shared.removeprefix(f"{key}_")
                        break
                else:
                    node = nodes.get(key)
                    if node is None:
                        return None, entries, entries
            if node.prefixes is not None:
                block = node.prefixes.key(value)
                if block != value:
                    blocks = blocks or {}
                    blocks[index] = block
            if index == last:
                if node.rule is None or (shared is None and blocks is None):
                    return node.rule, entries, entries
                blocked = entries if blocks is None else _with(entries, blocks)
                counted = blocked if shared is None else _with(blocked, shared)
                return node.rule, counted, blocked
            level = node.children
            if not level.nodes:
                return None, entries, entries
        return None, entries, entries

    def resolve(self, domain: str, descriptors: Sequence[Sequence[Entry]]) -> list[Rule | None]:
        """``match`` every descriptor of one request, then apply ``replaces``.

        A matched rule named X becomes ``None`` when another matched rule of the same request
        lists X in its ``replaces``. The result has the same length and order as
        ``descriptors``.
        """
        rules = [self.match(domain, entries) for entries in descriptors]
        replaced = replaced_names(rules)
        if replaced:
            rules = [None if rule is not None and rule.name in replaced else rule for rule in rules]
        return rules


def _with(entries: Sequence[Entry], values: dict[int, str]) -> tuple[Entry, ...]:
    """``entries`` with the values of the indexes in ``values`` replaced."""
    return tuple((key, values.get(index, value)) for index, (key, value) in enumerate(entries))


def replaced_names(rules: Iterable[Rule | None]) -> set[str]:
    """The names that the matched ``rules`` of one request replace."""
    return {name for rule in rules if rule is not None for name in rule.replaces}
