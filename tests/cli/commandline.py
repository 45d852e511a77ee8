"""``ratekeeper`` run as a real process, as an operator's shell runs it."""

from __future__ import annotations

import subprocess
import sys


def run(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """``ratekeeper argv...`` fed ``stdin``: ``(status, stdout, stderr)``."""
    completed = subprocess.run(
        [sys.executable, "-m", "ratekeeper.cli", *argv],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return completed.returncode, completed.stdout.decode(), completed.stderr.decode()
