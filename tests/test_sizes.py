"""``scripts/sizes.py`` holds modules to 400 lines and functions to 80, honours its allow-list,
and reports an allow-list entry that is no longer needed: on a constructed tree, and on this
checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "sizes.py"


def function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly ``lines`` lines from its ``def`` line, after one decorator."""
    body = [f"{indent}    x = {i}" for i in range(lines - 2)]
    return (
        "\n".join(
            [f"{indent}@staticmethod", f"{indent}def {name}():", *body, f"{indent}    return x"]
        )
        + "\n"
    )


def module(lines: int, *parts: str) -> str:
    """``parts``, then blank lines to make ``lines`` physical lines."""
    text = "".join(parts)
    return text + "\n" * (lines - len(text.splitlines()))


def run(root: Path) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout == ""
    return done.returncode, done.stderr.splitlines()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A checkout whose modules and functions are all at their limits exactly."""
    package = tmp_path / "src" / "ratekeeper"
    (package / "engine").mkdir(parents=True)
    (tmp_path / "scripts").mkdir()
    (package / "__init__.py").write_text(module(400))
    (package / "engine" / "plans.py").write_text(
        module(200, "class Plan:\n", function("build", 80, "    "), function("top", 80))
    )
    return tmp_path


def allow(root: Path, text: str) -> None:
    (root / "scripts" / "sizes.toml").write_text(text)


def test_a_tree_within_the_limits_passes(tree: Path) -> None:
    assert run(tree) == (0, [])


def test_a_module_and_a_function_over_their_limits_fail_one_line_each(tree: Path) -> None:
    (tree / "src" / "ratekeeper" / "__init__.py").write_text(module(401))
    plans = tree / "src" / "ratekeeper" / "engine" / "plans.py"
    plans.write_text(
        module(
            200,
            '"""Plans."""\n\n',
            "class Plan:\n",
            function("build", 81, "    "),
            function("top", 80),
            "def outer():\n",
            function("inner", 81, "    "),
        )
    )
    assert run(tree) == (
        1,
        [
            "src/ratekeeper/__init__.py:1 ratekeeper.__init__: 401 lines (most 400)",
            "src/ratekeeper/engine/plans.py:5 Plan.build: 81 lines (most 80)",
            "src/ratekeeper/engine/plans.py:167 outer: 83 lines (most 80)",
            "src/ratekeeper/engine/plans.py:169 outer.inner: 81 lines (most 80)",
        ],
    )


def test_the_allow_list_is_honoured(tree: Path) -> None:
    (tree / "src" / "ratekeeper" / "__init__.py").write_text(module(450))
    plans = tree / "src" / "ratekeeper" / "engine" / "plans.py"
    plans.write_text(module(200, "class Plan:\n", function("build", 120, "    ")))
    (tree / "src" / "ratekeeper" / "engine" / "big_pb2.py").write_text(module(900))
    allow(
        tree,
        '[skip]\n"src/ratekeeper/engine/*_pb2*.py" = "generated"\n'
        '[allow]\n"src/ratekeeper/__init__.py" = "split pending"\n'
        '"src/ratekeeper/engine/plans.py:Plan.build" = "split pending"\n',
    )
    assert run(tree) == (0, [])


def test_an_entry_no_longer_needed_is_stale(tree: Path) -> None:
    allow(
        tree,
        '[skip]\n"src/ratekeeper/proto/*_pb2.py" = "generated"\n'
        '[allow]\n"src/ratekeeper/__init__.py" = "split pending"\n'
        '"src/ratekeeper/engine/plans.py:Plan.build" = "split pending"\n'
        '"src/ratekeeper/engine/plans.py:Plan.gone" = "split pending"\n'
        '"src/ratekeeper/gone.py" = "split pending"\n',
    )
    assert run(tree) == (
        1,
        [
            "scripts/sizes.toml: stale skip 'src/ratekeeper/proto/*_pb2.py': no such module",
            "scripts/sizes.toml: stale entry 'src/ratekeeper/__init__.py': 400 lines (most 400)",
            "scripts/sizes.toml: stale entry 'src/ratekeeper/engine/plans.py:Plan.build': "
            "80 lines (most 80)",
            "scripts/sizes.toml: stale entry 'src/ratekeeper/engine/plans.py:Plan.gone': "
            "no such module or function",
            "scripts/sizes.toml: stale entry 'src/ratekeeper/gone.py': no such module or function",
        ],
    )


def test_every_exception_gives_its_reason(tree: Path) -> None:
    (tree / "src" / "ratekeeper" / "__init__.py").write_text(module(450))
    allow(tree, '[allow]\n"src/ratekeeper/__init__.py" = " "\n')
    assert run(tree) == (
        1,
        ["scripts/sizes.toml: entry 'src/ratekeeper/__init__.py' gives no reason"],
    )


def test_this_checkout_passes() -> None:
    assert run(ROOT) == (0, [])
