"""Every import of ratekeeper that the README and docs/ show runs as written: each in a fresh
interpreter, with every warning an error, so that a documented path cannot move or start to
warn unnoticed. A path that warns is a page to update to the new path."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_MODULE = r"ratekeeper(?:\.\w+)*\b"
#: A ``from`` import, its names in parentheses over several lines or to the end of the line (a
#: comment or ``;`` ends it), or a plain ``import``.
_STATEMENT = (
    rf"from[ \t]+{_MODULE}[ \t]+import[ \t]+(?:\([^)]*\)|[^\n#;`]*[^\s#;`])"
    rf"|import[ \t]+{_MODULE}(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*"
)
#: An import statement at the start of a line of code, after a ``>>>`` prompt if any.
IN_CODE = re.compile(rf"^[ \t]*(?:>>>[ \t]*)?(?P<statement>{_STATEMENT})", re.MULTILINE)
#: An import statement alone in an inline code span of prose: `from ratekeeper import Limit`.
IN_PROSE = re.compile(rf"`(?P<statement>{_STATEMENT})`")
FENCE = re.compile(r"^[ \t]*(```|~~~)")


def imports(text: str) -> list[tuple[int, str]]:
    """The ratekeeper imports ``text`` (markdown) shows, with the line each starts on: those in
    fenced code blocks, then those alone in an inline code span."""
    code: list[str] = []
    prose: list[str] = []
    fence = None
    for line in text.splitlines():  # both keep every line, blank where it is the other's
        marker = FENCE.match(line)
        if marker and fence in (None, marker.group(1)):
            fence = marker.group(1) if fence is None else None
            code.append("")
            prose.append("")
        else:
            code.append(line if fence else "")
            prose.append("" if fence else line)
    found = []
    for pattern, lines in ((IN_CODE, code), (IN_PROSE, prose)):
        joined = "\n".join(lines)
        for match in pattern.finditer(joined):
            statement = re.sub(r"\n[ \t]*(?:\.\.\.[ \t]*)?", "\n    ", match["statement"])
            found.append((joined.count("\n", 0, match.start("statement")) + 1, statement))
    return found


def _documented() -> dict[str, list[str]]:
    """Each import statement shown, with where: ``README.md:64``."""
    where: dict[str, list[str]] = {}
    for page in PAGES:
        for line, statement in imports(page.read_text(encoding="utf-8")):
            where.setdefault(statement, []).append(f"{page.relative_to(ROOT)}:{line}")
    return where


DOCUMENTED = _documented()


def test_the_pages_show_imports_of_ratekeeper_to_check() -> None:
    assert sum(map(len, DOCUMENTED.values())) >= 30
    assert any(place.startswith("README.md:") for places in DOCUMENTED.values() for place in places)


@pytest.mark.parametrize("statement", DOCUMENTED, ids=lambda statement: " ".join(statement.split()))
def test_a_documented_import_runs_without_error_or_warning(statement: str, tmp_path: Path) -> None:
    places = ", ".join(DOCUMENTED[statement])
    tree = ast.parse(statement)
    assert [type(node) for node in tree.body] in ([ast.Import], [ast.ImportFrom]), places
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", statement],
        cwd=tmp_path,  # nothing beside it shadows the installed package
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), f"{places}: {statement}"


SAMPLE = """\
Prose `from ratekeeper import Limit` and from ratekeeper's own words, `import ratekeeper`.

```python
import math
from ratekeeper import (
    Limit,
    Limiter,  # a comment
)
from ratekeeper.web import keys  # the keys
import ratekeeper.testing as testing, ratekeeper.web
>>> from ratekeeper.engine import Engine; engine = Engine()
```

    ```
    from ratekeeper.rules import parse_rules
    ```
"""


def test_imports_are_found_in_code_blocks_over_several_lines_and_in_prose() -> None:
    assert imports(SAMPLE) == [
        (5, "from ratekeeper import (\n    Limit,\n    Limiter,  # a comment\n    )"),
        (9, "from ratekeeper.web import keys"),
        (10, "import ratekeeper.testing as testing, ratekeeper.web"),
        (11, "from ratekeeper.engine import Engine"),
        (15, "from ratekeeper.rules import parse_rules"),
        (1, "from ratekeeper import Limit"),
        (1, "import ratekeeper"),
    ]
    for _, statement in imports(SAMPLE):
        ast.parse(statement)
