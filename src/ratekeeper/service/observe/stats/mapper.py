"""statsd_exporter's mappings: a StatsD name to a Prometheus name and labels.

The reference's Prometheus sink hands every statistic to statsd_exporter's mapper
(``github.com/prometheus/statsd_exporter/pkg/mapper``), configured by the YAML of
``PROMETHEUS_MAPPER_YAML``, else its own ``default_mapper.yaml`` (copied here as it is). No
maintained Python library reads these mappings, so this module does, for counters, with the
mapper's semantics:

- a ``glob`` mapping (the default ``match_type``) matches the whole name, each ``*`` one
  dot-free run of characters (possibly empty), and the glob mappings are tried in file order
  first;
- then the ``regex`` mappings, in file order: a Go regular expression searched in the name
  (unanchored), ``$1``, ``${1}`` or ``${name}`` in the mapping's ``name`` and labels standing
  for its groups (an unknown group for nothing, as Go's ``Regexp.Expand`` does);
- a mapping with ``match_metric_type`` other than ``counter`` is skipped; ``action: drop``
  drops what it matches;
- a name no mapping matches keeps its name, every character outside ``[a-zA-Z0-9_]`` made
  ``_`` (and a leading digit prefixed with ``_``), without labels.

``PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`` removes the default mapper's one ``scale: 0.001``
line, as the reference does (it scales a timer, which ratekeeper does not send).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["DROP", "Mapper", "Mapping_", "default_mapper_text", "escaped"]

#: What ``Mapper.map`` answers for a name an ``action: drop`` mapping matches.
DROP = None

_GROUP = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def default_mapper_text(milliseconds: bool = False) -> str:
    """The reference's default mapper (``src/stats/prom/default_mapper.yaml``); with
    ``milliseconds``, without its ``scale: 0.001`` line."""
    text = resources.files(__package__).joinpath("default_mapper.yaml").read_text("utf-8")
    return text.replace("    scale: 0.001\n", "", 1) if milliseconds else text


def escaped(name: str) -> str:
    """A name no mapping matched, as statsd_exporter exports it."""
    name = _INVALID.sub("_", name)
    return f"_{name}" if name[:1].isdigit() else name


class Mapping_(NamedTuple):
    """One mapping: its compiled pattern, whether it is a regex, and what it gives."""

    pattern: re.Pattern[str]
    regex: bool
    name: str
    labels: tuple[tuple[str, str], ...]
    drop: bool


class Mapper:
    """The mappings of one YAML text; ``map(name)`` gives ``(name, labels)``, None when a
    mapping drops it. ``ValueError`` (naming ``source``) for a text that is no mapper."""

    def __init__(self, text: str, source: str = "the mapper") -> None:
        import yaml

        try:
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            raise ValueError(f"{source}: not YAML: {error}") from None
        if not isinstance(loaded, dict) or not isinstance(loaded.get("mappings", []), list):
            raise ValueError(f"{source}: expected a mapping with a list of mappings")
        defaults = loaded.get("defaults") or {}
        kind = defaults.get("match_type", "glob") if isinstance(defaults, dict) else "glob"
        globs: list[Mapping_] = []
        regexes: list[Mapping_] = []
        for index, item in enumerate(loaded.get("mappings") or []):
            one = _mapping(item, kind, f"{source}: mappings[{index}]")
            if one is not None:
                (regexes if one.regex else globs).append(one)
        self.mappings = (*globs, *regexes)
        self._known: dict[str, tuple[str, tuple[tuple[str, str], ...]] | None] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> Mapper:
        try:
            text = Path(path).read_text("utf-8")
        except OSError as error:
            raise ValueError(f"{path}: cannot read the mapper: {error.strerror}") from None
        return cls(text, str(path))

    def map(self, name: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
        """The Prometheus name and labels of the StatsD counter ``name``; None: dropped."""
        try:
            return self._known[name]
        except KeyError:
            pass
        found = self._map(name)
        if len(self._known) < 100_000:
            self._known[name] = found
        return found

    def _map(self, name: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
        for one in self.mappings:
            matched = one.pattern.search(name) if one.regex else one.pattern.fullmatch(name)
            if matched is None:
                continue
            if one.drop:
                return DROP
            return _expand(one.name, matched), tuple(
                (label, _expand(value, matched)) for label, value in one.labels
            )
        return escaped(name), ()


def _expand(text: str, matched: re.Match[str]) -> str:
    """``text`` with each ``$n``, ``${n}`` or ``${name}`` the group of ``matched`` it names;
    a group that does not exist, or took no part, stands for nothing (Go's ``Expand``)."""

    def group(found: re.Match[str]) -> str:
        which = found.group(1) or found.group(2)
        try:
            return matched.group(int(which) if which.isdigit() else which) or ""
        except IndexError:  # no such group, by number or by name
            return ""

    return _GROUP.sub(group, text)


def _mapping(item: Any, kind: str, where: str) -> Mapping_ | None:
    """One mapping of the YAML; None when it does not apply to counters."""
    if not isinstance(item, dict) or not isinstance(item.get("match"), str):
        raise ValueError(f"{where}: expected a mapping with a match")
    if item.get("match_metric_type", "counter") != "counter":
        return None
    match_type = item.get("match_type") or kind
    drop = item.get("action", "map") == "drop"
    if not drop and not isinstance(item.get("name"), str):
        raise ValueError(f"{where}: expected a name")
    labels = item.get("labels") or {}
    if not isinstance(labels, dict):
        raise ValueError(f"{where}.labels: expected a mapping of label to value")
    if match_type == "regex":
        try:
            pattern = re.compile(item["match"])
        except re.error as error:
            raise ValueError(f"{where}.match: not a regular expression: {error}") from None
    elif match_type == "glob":
        parts = (re.escape(part) for part in item["match"].split("*"))
        pattern = re.compile("([^.]*)".join(parts))
    else:
        raise ValueError(f"{where}.match_type: expected glob or regex, not {match_type!r}")
    pairs = tuple((str(label), str(value)) for label, value in labels.items())
    return Mapping_(pattern, match_type == "regex", item.get("name", ""), pairs, drop)
