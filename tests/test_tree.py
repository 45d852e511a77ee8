"""The tests' own rule: a helper used by more than one test module lives once, in a helper
module of the tests' package (``tests/servers.py``, ``tests/web/servers.py``, ...), never in a
test module another imports: a test module's helpers change with its tests, and importing one
runs its module-level code and its fixtures' imports for the other."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (``tests.….test_*``) the module at ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "tests" and parts[-1].startswith("test_"):
                found.append(name)
    return found


def test_no_module_imports_a_test_module() -> None:
    sources = [*ROOT.joinpath("tests").rglob("*.py"), *ROOT.joinpath("benchmarks").rglob("*.py")]
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sources
        if (found := imported_test_modules(path))
    }
    assert offenders == {}


def test_the_rule_sees_both_forms_of_import(tmp_path: Path) -> None:
    module = tmp_path / "sample.py"
    module.write_text(
        "import tests.web.test_wsgi\n"
        "from tests.web.test_real_servers import waitress_serving\n"
        "from tests.web.servers import uvicorn_serving\n"
    )
    assert imported_test_modules(module) == ["tests.web.test_wsgi", "tests.web.test_real_servers"]
