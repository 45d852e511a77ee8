"""Loading rule files: read them, parse the YAML, validate, and join their domains."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ratekeeper.errors import ConfigError, MissingExtraError
from ratekeeper.rules.matching import RuleSet
from ratekeeper.rules.model import Level, Rule

if TYPE_CHECKING:
    from yaml.nodes import Node

#: A directory given to ``load_rules`` contributes the files with these suffixes.
SUFFIXES = (".yaml", ".yml")


def load_rules(paths: Iterable[str | os.PathLike[str]]) -> RuleSet:
    """Load Envoy rate-limit service rule files into one ``RuleSet``.

    Each path is a file, or a directory standing for every ``*.yaml`` and ``*.yml`` file in it
    (not hidden ones, not subdirectories), in sorted order. Files load in the order given; each
    holds one domain, and no two files may hold the same domain. Raises ``ConfigError`` whose
    ``errors`` list every problem in every file, each starting with the file name and the path
    inside the file; ``MissingExtraError`` when PyYAML is not installed. Example::

        rules = load_rules(["/etc/ratekeeper/rules"])
    """
    require_yaml()
    errors: list[str] = []
    sources: list[tuple[str, str]] = []
    for path in paths:
        name = os.fspath(path)
        if os.path.isdir(name):
            files = [os.path.join(name, entry) for entry in sorted(os.listdir(name))]
            files = [
                file
                for file in files
                if file.endswith(SUFFIXES)
                and not os.path.basename(file).startswith(".")
                and os.path.isfile(file)
            ]
        else:
            files = [name]
        for file in files:
            try:
                with open(file, encoding="utf-8") as handle:
                    sources.append((file, handle.read()))
            except UnicodeDecodeError as exc:
                errors.append(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})")
            except OSError as exc:
                errors.append(f"{file}: cannot read: {exc.strerror or exc}")
    return _build(sources, errors)


def parse_rules(text: str, filename: str = "<rules>") -> RuleSet:
    """Load one rule file's text; ``filename`` starts every error message.

    The same validation and errors as ``load_rules``. Example::

        rules = parse_rules("domain: api\\ndescriptors: []\\n")
    """
    return _build([(filename, text)], [])


def _build(sources: list[tuple[str, str]], errors: list[str]) -> RuleSet:
    require_yaml()
    import yaml
    from yaml.constructor import SafeConstructor

    from ratekeeper.rules.schema import Walker

    domains: dict[str, Level] = {}
    owners: dict[str, str] = {}
    rules: list[Rule] = []
    for name, text in sources:
        try:
            root = _compose(text)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            context = f"{exc.context}: " if exc.context else ""
            errors.append(f"{name}: {where}invalid YAML: {context}{exc.problem}")
            continue
        except yaml.YAMLError as exc:
            errors.append(f"{name}: invalid YAML: {exc}")
            continue
        walker = Walker(name, SafeConstructor())
        document = walker.document(root)
        errors.extend(walker.errors)
        if document.domain is None:
            continue
        if document.domain in owners:
            errors.append(
                f"{name}: domain: duplicate domain '{document.domain}' "
                f"(already defined in {owners[document.domain]})"
            )
            continue
        owners[document.domain] = name
        domains[document.domain] = document.level
        rules.extend(document.rules)
    if errors:
        raise ConfigError(errors)
    return RuleSet(domains, [name for name, _ in sources], rules)


def _compose(text: str) -> Node | None:
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def require_yaml() -> None:
    """Raise ``MissingExtraError`` naming the ``rules`` extra when PyYAML is not installed."""
    try:
        import yaml  # noqa: F401
    except ImportError:
        raise MissingExtraError("PyYAML", "rules") from None
