"""Check the sizes of ratekeeper's modules and functions: a module past 400 lines is two ideas,
a function past 80 lines is several steps.

    .venv/bin/python scripts/sizes.py            # run by scripts/test.sh after lint-imports

Every ``*.py`` under ``src/ratekeeper/`` is read with ``ast``. A module counts its physical
lines; a function or method counts from its ``def`` line (decorators excluded) to its last
line, nested functions each on their own. Each offender is one line on stderr,
``path:line name: N lines (most M)``, and the exit status is 1.

The exceptions are in ``scripts/sizes.toml``, each with its reason (an entry without one
fails). An entry that no longer needs its exception (the module or function is within the
limits now, or gone) is reported as stale and fails the check too, so that the list only
shrinks.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MODULE_LINES = 400
FUNCTION_LINES = 80
PACKAGE = Path("src") / "ratekeeper"
ALLOW_LIST = Path("scripts") / "sizes.toml"


@dataclass(frozen=True)
class Size:
    """One module or function measured: ``key`` is how the allow-list names it."""

    path: str  # relative to the root, with "/" separators
    line: int
    name: str
    lines: int
    most: int

    @property
    def key(self) -> str:
        return self.path if self.line == 0 else f"{self.path}:{self.name}"

    def __str__(self) -> str:
        return f"{self.path}:{max(self.line, 1)} {self.name}: {self.lines} lines (most {self.most})"


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function and method under ``tree`` with its dotted name (``Limit.__init__``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from functions(node, f"{name}.")
        else:
            yield from functions(node, prefix)


def measure(root: Path, path: Path) -> Iterator[Size]:
    """The module at ``path`` and each of its functions."""
    text = path.read_text(encoding="utf-8")
    relative = path.relative_to(root).as_posix()
    module = ".".join(path.relative_to(root / "src").with_suffix("").parts)
    yield Size(relative, 0, module, len(text.splitlines()), MODULE_LINES)
    for name, node in functions(ast.parse(text, filename=relative)):
        assert node.end_lineno is not None
        lines = node.end_lineno - node.lineno + 1
        yield Size(relative, node.lineno, name, lines, FUNCTION_LINES)


def load_allowed(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The allow-list: (globs of modules not measured, keys allowed over) -> reason."""
    table = tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return dict(table.get("skip", {})), dict(table.get("allow", {}))


def check(root: Path) -> list[str]:
    """The lines to report: each offender not allowed, then each stale allow-list entry."""
    skip, allow = load_allowed(root / ALLOW_LIST)
    sources = sorted((root / PACKAGE).rglob("*.py"))
    skipped = {
        glob: {p for p in sources if fnmatch.fnmatch(p.relative_to(root).as_posix(), glob)}
        for glob in skip
    }
    measured = [p for p in sources if not any(p in paths for paths in skipped.values())]
    sizes = [size for path in measured for size in measure(root, path)]
    report = [str(s) for s in sizes if s.lines > s.most and s.key not in allow]
    where = ALLOW_LIST.as_posix()
    report += [f"{where}: stale skip {g!r}: no such module" for g, p in skipped.items() if not p]
    largest: dict[str, Size] = {}
    for size in sizes:  # a name defined twice in one module (a property's setter) is one key
        if size.key not in largest or size.lines > largest[size.key].lines:
            largest[size.key] = size
    report += [
        f"{where}: entry {key!r} gives no reason"
        for key, reason in (*skip.items(), *allow.items())
        if not str(reason).strip()
    ]
    for key in allow:
        size = largest.get(key)
        if size is None:
            report.append(f"{where}: stale entry {key!r}: no such module or function")
        elif size.lines <= size.most:
            report.append(f"{where}: stale entry {key!r}: {size.lines} lines (most {size.most})")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the checkout to check (default: this one)",
    )
    report = check(parser.parse_args(argv).root)
    for line in report:
        print(line, file=sys.stderr)
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
