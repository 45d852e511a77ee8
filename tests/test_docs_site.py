"""The documentation holds together: the README's first screen has the two commands and the way
into docs/; every page is reachable from docs/index.md and in mkdocs.yml's nav (which
``mkdocs build --strict``, run by scripts/test.sh, also checks with every link); the API pages
render the whole public surface; and every test docs/precedence.md names exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import ratekeeper

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))


def test_the_readme_opens_with_the_two_commands_and_points_to_the_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = readme.splitlines()[:30]
    for command in ("bash scripts/serve.sh", "bash scripts/test.sh"):
        assert any(line.startswith(command + " ") for line in first_screen), command
    assert "](docs/index.md)" in readme
    assert len(readme.splitlines()) <= 160  # the first screens: the rest is in docs/


def test_every_page_is_linked_from_the_index() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", index))
    assert set(PAGES) - {"index.md"} <= linked


def test_every_page_is_in_the_sites_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:") :]
    assert set(re.findall(r"[\w/.-]+\.md", nav)) == set(PAGES)


def rendered() -> set[str]:
    """The public names the API pages render: each ``::: path`` is one object, or a package's
    ``__all__`` (or the ``members`` its options list)."""
    names: set[str] = set()
    for page in sorted((DOCS / "api").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"^::: ([\w.]+)\n((?:    .*\n)*)", text, re.MULTILINE):
            path, options = match[1], match[2]
            members = re.search(r"members: (\[.*\]|false)", options)
            try:
                module = importlib.import_module(path)
            except ModuleNotFoundError:
                names.add(path)
                continue
            if members is None:
                names.update(f"{path}.{name}" for name in getattr(module, "__all__", []))
            elif members[1] != "false":
                names.update(f"{path}.{name.strip()}" for name in members[1][1:-1].split(","))
    return names


def resolve(path: str) -> object:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_api_pages_render_every_public_name() -> None:
    shown = {id(resolve(path)) for path in rendered()}
    missing = [name for name in ratekeeper.__all__ if id(getattr(ratekeeper, name)) not in shown]
    assert missing == []


PRECEDENCE = (DOCS / "precedence.md").read_text(encoding="utf-8")
NAMED = sorted(set(re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", PRECEDENCE)))


def test_the_precedence_page_names_tests() -> None:
    assert len(NAMED) >= 20


@pytest.mark.parametrize(("path", "test"), NAMED, ids=lambda value: value)
def test_each_test_the_precedence_page_names_exists(path: str, test: str) -> None:
    source = (ROOT / path).read_text(encoding="utf-8")
    assert not test or re.search(rf"^(?:async )?def {test}\(", source, re.MULTILINE), test
