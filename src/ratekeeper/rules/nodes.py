"""Reading PyYAML's composed nodes strictly: typed fields, with every problem reported.

``NodeReader`` reads nodes rather than constructed objects, so that it sees duplicate keys,
knows line numbers, and reads strings as the text written (Envoy reads ``value: 200`` as the
string ``"200"``). It never raises: each problem is appended to ``errors`` as
``"<file>: <path>: <message>"``.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ratekeeper.core.errors import InvalidLimitError
from ratekeeper.core.periods import parse_period

_TAG = "tag:yaml.org,2002:"
_KINDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean"}

#: Values longer than this are cut, with an ellipsis, where a message quotes them.
SHOWN = 80


class NodeReader:
    """Typed access to one file's nodes; problems go to ``errors``."""

    def __init__(self, filename: str, constructor: SafeConstructor) -> None:
        self.filename = filename
        self.errors: list[str] = []
        self._constructor = constructor

    def error(self, path: str, message: str) -> None:
        where = f"{path}: " if path else ""
        self.errors.append(f"{self.filename}: {where}{message}")

    def period(self, node: Node | None, path: str) -> float | None:
        """A period string (``"5m"``) or seconds, positive and finite; ``None`` when absent or
        invalid."""
        if node is None or is_null(node):
            return None
        value = self.scalar(node)
        seconds = None
        try:
            if isinstance(value, str) and len(value) <= SHOWN:
                seconds = parse_period(value)
            elif type(value) in (int, float):
                seconds = float(value)
        except InvalidLimitError as exc:
            self.error(path, str(exc))
            return None
        except OverflowError:  # an integer too large for a float
            seconds = None
        if seconds is not None and seconds > 0 and math.isfinite(seconds):
            return seconds
        self.error(
            path,
            "expected a period such as '5m' or a positive, finite number of seconds, "
            f"got {describe(node)}",
        )
        return None

    def fields(
        self,
        node: Node,
        path: str,
        allowed: tuple[str, ...],
        what: str,
    ) -> dict[str, Node] | None:
        """The mapping's values by key, or ``None`` (reported) when ``node`` is no mapping.

        Keys outside ``allowed`` are reported.
        """
        if not isinstance(node, MappingNode):
            self.error(path, f"expected {what}, got {describe(node)}")
            return None
        own = {id(key) for key, _ in node.value}
        if any(key.tag == _TAG + "merge" for key, _ in node.value):
            try:
                self._constructor.flatten_mapping(node)
            except ConstructorError as exc:
                self.error(path, f"invalid merge: {exc.problem}")
                return None
        result: dict[str, Node] = {}
        lines: dict[str, Node] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag != _TAG + "str":
                self.error(path, f"a key must be a string, got {describe(key_node)}")
                continue
            key = key_node.value
            where = f"{path}.{shorten(key)}" if path else shorten(key)
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
        return "" if is_null(node) else str(node.value)

    def boolean(self, node: Node | None, path: str) -> bool:
        if node is None or is_null(node):
            return False
        if isinstance(node, ScalarNode) and node.tag == _TAG + "bool":
            return bool(self.scalar(node))
        self.error(path, f"expected true or false, got {describe(node)}")
        return False

    def scalar(self, node: Node) -> Any:
        """A scalar's value (int, float, bool, str by its tag); ``None`` for anything else."""
        if not isinstance(node, ScalarNode) or node.tag.removeprefix(_TAG) not in _KINDS:
            return None
        constructor = self._constructor
        try:
            return constructor.yaml_constructors[node.tag](constructor, node)
        except ValueError:  # an integer of more digits than Python converts
            return None


def unknown_key(key: str, allowed: tuple[str, ...]) -> str:
    """The message for an unknown key, suggesting the closest allowed one."""
    shown = shorten(key)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6) if len(key) <= SHOWN else []
    if close:
        return f"unknown key '{shown}'; did you mean '{close[0]}'?"
    return f"unknown key '{shown}'; expected one of {', '.join(allowed)}"


def shorten(text: str) -> str:
    """``text``, cut to ``SHOWN`` characters with an ellipsis when it is longer."""
    return text if len(text) <= SHOWN else text[:SHOWN] + "…"


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
        return f"a string {shorten(node.value)!r}"
    return f"{_KINDS.get(kind, 'a value')} {shorten(node.value)}"


def is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _TAG + "null"
