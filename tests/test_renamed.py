"""Names that were renamed still work, for a while: each old spelling gives the same object as
its new name, warns with a ``DeprecationWarning`` that names the new one and the version that
removes the old, and is listed in CHANGELOG.md's "Renamed" section. ratekeeper itself, its
tests and its benchmarks never use an old name."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from ratekeeper.core.moved import REMOVED_IN, renamed_message

ROOT = Path(__file__).resolve().parents[1]

#: Each old name of a module's attribute: its new name, in the same module.
NAMES: dict[str, str] = {
    "ratekeeper.web.Outcome": "ratekeeper.web.GateDecision",
    "ratekeeper.web.Result": "ratekeeper.web.HandlerResult",
    "ratekeeper.core.store_keys.VERSION": "ratekeeper.core.store_keys.KEY_LAYOUT",
    "ratekeeper.service.runtime.settings.Address": (
        "ratekeeper.service.runtime.settings.ListenAddress"
    ),
}


def _split(dotted: str) -> tuple[str, str]:
    module, _, name = dotted.rpartition(".")
    return module, name


@pytest.mark.parametrize("old", NAMES)
def test_an_old_name_warns_and_gives_the_object_of_the_new_one(old: str) -> None:
    module_name, name = _split(old)
    module = importlib.import_module(module_name)
    with pytest.warns(DeprecationWarning) as warned:
        found = getattr(module, name)
    assert [str(warning.message) for warning in warned] == [renamed_message(old, NAMES[old])]
    assert warned[0].filename == __file__  # the line that used the old name
    assert found is getattr(module, _split(NAMES[old])[1])
    with pytest.warns(DeprecationWarning):  # every use warns, not only the first
        assert getattr(module, name) is found
    assert name not in getattr(module, "__all__", ())


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    import ratekeeper.web

    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        ratekeeper.web.Nothing  # noqa: B018


def test_python_shows_the_warning_at_the_users_import_by_default(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from ratekeeper.web import Outcome"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == (
        "<string>:1: DeprecationWarning: "
        + renamed_message("ratekeeper.web.Outcome", "ratekeeper.web.GateDecision")
        + "\n"
    )


def test_the_message_names_the_new_spelling_and_the_version_that_removes_the_old() -> None:
    assert renamed_message("ratekeeper.web.Outcome", "ratekeeper.web.GateDecision") == (
        "ratekeeper.web.Outcome is deprecated and will be removed in 0.3.0: "
        "use ratekeeper.web.GateDecision"
    )


def renamed_section() -> str:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    section = changelog[changelog.index("### Renamed") :]
    return section[: section.index("\n### ", 1)]


def test_the_changelog_lists_every_renamed_name_and_when_it_goes() -> None:
    section = renamed_section()
    assert f"removed in {REMOVED_IN}" in section
    for old, new in NAMES.items():
        line = f"- `{old}` → `{new}`"
        assert line in section, line


def _uses(path: Path) -> set[str]:
    """The old names ``path`` imports (``from ratekeeper.web import Outcome``) or reads from a
    module it imported (``ratekeeper.web.Outcome``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Attribute):
            found.add(ast.unparse(node))
    return found & NAMES.keys()


def test_ratekeeper_its_tests_and_benchmarks_never_use_an_old_name() -> None:
    users = {
        str(path.relative_to(ROOT)): sorted(_uses(path))
        for folder in ("src", "benchmarks", "tests", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if path != Path(__file__)
    }
    assert {path: olds for path, olds in users.items() if olds} == {}
