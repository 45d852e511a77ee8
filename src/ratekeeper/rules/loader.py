"""Loading rule files: read them, parse the YAML, validate, and join their domains."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ratekeeper.core.errors import ConfigError, MissingExtraError
from ratekeeper.rules.matching import RuleSet
from ratekeeper.rules.model import Level, Rule

if TYPE_CHECKING:
    from yaml.nodes import Node

#: A directory given to ``load_rules`` contributes the files with these suffixes.
SUFFIXES = (".yaml", ".yml")


def load_rules(paths: Iterable[str | os.PathLike[str]], *, merge_domains: bool = False) -> RuleSet:
    """Load Envoy rate-limit service rule files into one ``RuleSet``.

    Each path is a file, or a directory standing for every ``*.yaml`` and ``*.yml`` file in it
    (not hidden ones, not subdirectories), in sorted order. Files load in the order given; each
    holds one domain, and no two files may hold the same domain, unless ``merge_domains`` is
    true: then the top-level descriptors of files sharing a domain join one tree (Envoy's
    ``MERGE_DOMAIN_CONFIG``), and only a descriptor defined twice is an error. Raises
    ``ConfigError`` whose ``errors`` list every problem in every file, each starting with the
    file name and the path inside the file; ``MissingExtraError`` when PyYAML is not
    installed. Example::

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
    return _build(sources, errors, merge_domains)


def parse_rules(text: str, filename: str = "<rules>") -> RuleSet:
    """Load one rule file's text; ``filename`` starts every error message.

    The same validation and errors as ``load_rules``. Example::

        rules = parse_rules("domain: api\\ndescriptors: []\\n")
    """
    return _build([(filename, text)], [], merge_domains=False)


def _build(sources: list[tuple[str, str]], errors: list[str], merge_domains: bool) -> RuleSet:
    require_yaml()
    import yaml
    from yaml.constructor import SafeConstructor

    from ratekeeper.rules.nodes import shorten
    from ratekeeper.rules.schema import Walker

    domains: dict[str, Level] = {}
    owners: dict[str, str] = {}
    rules: list[Rule] = []
    # A large file makes millions of nodes that all live until the file is walked; the cyclic
    # collector would traverse them again and again while they are made (most of the time of
    # a large load), and they hold no cycles to collect.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for name, text in sources:
            try:
                root = _compose(text)
            except yaml.YAMLError:
                errors.append(f"{name}: {_syntax_error(text)}")
                continue
            walker = Walker(name, SafeConstructor())
            domain, descriptors = walker.header(root)
            shared = merge_domains and domain is not None and domain in domains
            level = domains[domain] if shared and domain is not None else Level()
            found = walker.tree(descriptors, level)
            errors.extend(walker.errors)
            del root, descriptors
            if domain is None:
                continue
            if domain in owners and not merge_domains:
                errors.append(
                    f"{name}: domain: duplicate domain '{shorten(domain)}' "
                    f"(already defined in {owners[domain]})"
                )
                continue
            owners.setdefault(domain, name)
            domains[domain] = level
            rules.extend(found)
    finally:
        if collecting:
            gc.enable()
    if errors:
        raise ConfigError(errors)
    return RuleSet(domains, [name for name, _ in sources], rules)


def _compose(text: str) -> Node | None:
    """The file's node tree, by libyaml's C parser when PyYAML has it (much the faster)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node: Node | None = loader.get_single_node()
        return node
    finally:
        loader.dispose()


def _syntax_error(text: str) -> str:
    """Why ``text`` is not YAML, in the words of PyYAML's own parser (libyaml's differ), with
    the line and column."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        context = f"{exc.context}: " if exc.context else ""
        return f"{where}invalid YAML: {context}{exc.problem}"
    except yaml.YAMLError as exc:
        return f"invalid YAML: {exc}"
    finally:
        loader.dispose()
    return "invalid YAML"  # pragma: no cover - libyaml refused what PyYAML accepts


def require_yaml() -> None:
    """Raise ``MissingExtraError`` naming the ``rules`` extra when PyYAML is not installed."""
    try:
        import yaml  # noqa: F401
    except ImportError:
        raise MissingExtraError("PyYAML", "rules") from None
