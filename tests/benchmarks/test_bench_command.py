"""``python -m benchmarks`` without the bench extra: ``--help`` works, and a run that needs a
peer ends with one line naming the command that installs it, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: ``python -m benchmarks`` as if the bench extra's peers were not installed: an import of
#: one of them fails as a missing module's does.
WITHOUT_PEERS = """\
import runpy
import sys

HIDDEN = {"limits", "pyrate_limiter", "throttled"}


class Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Hidden())
sys.argv = ["benchmarks", *sys.argv[1:]]
runpy.run_module("benchmarks", run_name="__main__", alter_sys=True)
"""

INSTALL = (
    "python -m benchmarks: limits is not installed; install it with: pip install -e '.[bench]' "
    "(or run: bash scripts/bench.sh)\n"
)


def benchmarks(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PEERS, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_help_needs_no_peer() -> None:
    done = benchmarks("--help")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("usage: python -m benchmarks ")


@pytest.mark.parametrize("args", [["--quick"], ["--redis", "--quick"]])
def test_a_run_without_its_peers_names_the_install_command(args: list[str]) -> None:
    done = benchmarks(*args)
    assert (done.returncode, done.stderr) == (2, INSTALL)
