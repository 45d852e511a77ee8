"""What a newcomer meets first: ``scripts/serve.sh`` prints lines to try that reach the service
it starts, wherever it is told to listen; ``scripts/test.sh`` installs every tool a test needs,
so that none is skipped for want of one; and a clone holds no configuration store of anyone's."""

from __future__ import annotations

import fnmatch
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from benchmarks.service import load

from tests.servers import free_ports

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"

#: Each program a test runs, by the Debian package that brings it.
TOOLS = {
    "redis-server": "redis-server",
    "redis-cli": "redis-tools",
    "nginx": "nginx",
    "promtool": "prometheus",
    "prometheus": "prometheus",
    "chromium": "chromium",
    "openssl": "openssl",  # the Redis TLS tests' certificates
    "git": "git",  # the tracked files, read by a test
    **load.PACKAGES,  # the service benchmark's tests: wrk, h2load, nghttp
}


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """``serve.sh`` and ``setup.sh`` in a folder of their own, beside a ``.venv`` that is the
    one running these tests, marked as holding the server extra: setup.sh installs nothing.
    Its ``stubs`` folder, first on the scripts' PATH, holds an ``apt-get`` and a ``sudo`` that
    refuse, should setup.sh find something missing all the same."""
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    for name in ("serve.sh", "setup.sh"):
        shutil.copy(SCRIPTS / name, root / "scripts" / name)
    venv = root / ".venv"
    venv.mkdir()
    for entry in Path(sys.prefix).iterdir():
        if not entry.name.startswith(".installed"):
            (venv / entry.name).symlink_to(entry)
    (venv / ".installed-server").touch()
    (root / "stubs").mkdir()
    for name in ("apt-get", "sudo"):
        stub = root / "stubs" / name
        stub.write_text(f'#!/bin/sh\necho "refused in a test: {name} $*" >&2\nexit 1\n')
        stub.chmod(0o755)
    return root


class Serving:
    """``bash scripts/serve.sh ARGS`` running in ``cwd``: the lines it printed before the
    service's own log."""

    def __init__(self, clone: Path, cwd: Path, args: list[str], env: dict[str, str]) -> None:
        environ = {name: value for name, value in os.environ.items() if "RATEKEEPER" not in name}
        environ["PATH"] = f"{clone / 'stubs'}{os.pathsep}{environ.get('PATH', os.defpath)}"
        self.process = subprocess.Popen(
            ["bash", str(clone / "scripts" / "serve.sh"), *args],
            cwd=cwd,
            env={**environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.printed: list[str] = []
        assert self.process.stderr is not None
        stderr, pending = self.process.stderr.fileno(), b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if select.select([stderr], [], [], 1.0)[0]:
                chunk = os.read(stderr, 65536)
                if not chunk:  # it ended
                    break
                pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in map(bytes.decode, lines):
                if " INFO " in line:  # the service's own log
                    return
                self.printed.append(line)
                if "/dashboard?token=" in line:  # the last line printed to try it
                    return

    def stop(self) -> None:
        """SIGTERM to the service, which serve.sh became (``exec``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            assert self.process.stderr is not None
            self.process.stderr.close()


Serve = Callable[[list[str], dict[str, str]], Serving]


@pytest.fixture
def serve(clone: Path, tmp_path: Path) -> Iterator[Serve]:
    """Start serve.sh from the clone (in ``tmp_path / "run"``); each is stopped at the end."""
    started: list[Serving] = []

    def start(args: list[str], env: dict[str, str]) -> Serving:
        cwd = tmp_path / "run"
        cwd.mkdir(exist_ok=True)
        serving = Serving(clone, cwd, args, env)
        started.append(serving)
        return serving

    yield start
    for serving in started:
        serving.stop()


def _answer(curl: str) -> httpx.Response:
    """Run a printed ``curl -i URL -H ... -d BODY`` line as httpx would, once it answers."""
    words = shlex.split(curl)
    url, body = words[2], words[words.index("-d") + 1]
    deadline = time.monotonic() + 30
    while True:
        try:
            return httpx.post(url, content=body, headers={"Content-Type": "application/json"})
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.parametrize("given", ["flags", "--http=", "variables"])
def test_serve_sh_prints_the_address_it_serves_on(given: str, serve: Serve) -> None:
    http, grpc = free_ports(2)
    args, env = {
        "flags": (["--http", f"127.0.0.1:{http}", "--grpc", f"127.0.0.1:{grpc}"], {}),
        "--http=": ([f"--http=0.0.0.0:{http}", f"--grpc=127.0.0.1:{grpc}"], {}),
        "variables": (
            [],
            {"RATEKEEPER_HTTP": f"127.0.0.1:{http}", "RATEKEEPER_GRPC": f"127.0.0.1:{grpc}"},
        ),
    }[given]
    serving = serve(args, env)
    printed = serving.printed
    curls = [line for line in printed if line.startswith("curl ")]
    assert len(curls) == 2, printed
    for curl in curls:
        assert curl.startswith(f"curl -i http://127.0.0.1:{http}/v1/check "), curl
        answer = _answer(curl)
        assert answer.status_code == 200, answer.text
    assert re.fullmatch(rf"http://127\.0\.0\.1:{http}/dashboard\?token=\S{{16,}}", printed[-1])
    assert ":8080" not in "\n".join(printed)


def test_serve_sh_prints_no_address_when_the_settings_are_wrong(serve: Serve) -> None:
    serving = serve(["--http", "127.0.0.1:0"], {})
    assert serving.process.wait(timeout=60) == 1
    assert serving.printed == [
        "error: --http: expected HOST:PORT with a port from 1 to 65535, not '127.0.0.1:0'"
    ]


def test_test_sh_installs_every_tool_a_test_needs() -> None:
    script = (SCRIPTS / "test.sh").read_text(encoding="utf-8")
    installs = [line.split() for line in script.splitlines() if line.strip().startswith("apt_")]
    installed = {word for words in installs for word in words[1:]}
    for tool, package in TOOLS.items():
        assert f"command -v {tool} " in script, f"test.sh does not look for {tool}"
        assert package in installed, f"test.sh does not install {package} (for {tool})"


def test_no_configuration_store_is_part_of_a_clone() -> None:
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    for name in ("ratekeeper.db", "ratekeeper.db-wal", "ratekeeper.db-shm"):
        assert any(fnmatch.fnmatch(name, pattern) for pattern in ignored), name
    if (ROOT / ".git").exists():
        tracked = subprocess.run(
            ["git", "ls-files", "--", "*.db", "*.db-*", "*.sqlite", "*.sqlite3"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert tracked == ""
