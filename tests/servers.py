"""Real servers for the tests: started on free loopback ports, stopped by pid.

Nothing here mocks a server. Each server runs in a temporary directory and is killed (and
waited for) when its fixture ends, so that no test leaves a process behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise TimeoutError(f"{what} not ready after {timeout}s")


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


#: How many times a server is started on fresh ports when the last ones were taken meanwhile.
ATTEMPTS = 5


class ServerExited(RuntimeError):
    """A server process ended while starting, typically because its port was taken."""


class ReplyError(RuntimeError):
    """An error reply (``-ERR ...``) from a server."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (held together while chosen, so distinct)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_for(problems: Callable[[], list[str]], timeout: float, what: str) -> None:
    """Wait until ``problems()`` is empty; on timeout, name what was still not ready."""
    deadline = time.monotonic() + timeout
    left = problems()
    while left:
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not ready after {timeout}s: " + "; ".join(left))
        time.sleep(0.05)
        left = problems()


def command(port: int, *args: str, timeout: float = 2.0) -> Any:
    """Send one command to the server on ``port`` and return its decoded RESP2 reply."""
    payload = b"*%d\r\n" % len(args)
    for arg in args:
        data = arg.encode()
        payload += b"$%d\r\n%s\r\n" % (len(data), data)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        with sock.makefile("rb") as reader:
            return _reply(reader)


def _reply(reader: BinaryIO) -> Any:
    line = reader.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError(f"truncated reply {line!r}")
    kind, rest = line[:1], line[1:-2].decode()
    if kind == b"+":
        return rest
    if kind == b"-":
        raise ReplyError(rest)
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else reader.read(size + 2)[:-2].decode()
    if kind == b"*":
        size = int(rest)
        return None if size < 0 else [_reply(reader) for _ in range(size)]
    raise ConnectionError(f"unexpected reply {line!r}")


def info(port: int, section: str) -> dict[str, str]:
    """``INFO section`` (or ``CLUSTER INFO`` for ``section="cluster info"``) as a dict."""
    text = command(port, *section.split())
    return dict(
        line.split(":", 1) for line in text.splitlines() if ":" in line and line[:1] != "#"
    )


def _server_pid(port: int) -> int | None:
    """The pid of the redis-server answering on ``port``, or None if none answers (yet)."""
    try:
        return int(info(port, "server")["process_id"])
    except (OSError, ReplyError, KeyError, ValueError):
        return None


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1."""

    def __init__(self, directory: Path, port: int | None = None, *extra: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; scripts/test.sh installs it")
        self.port = port or free_port()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.args = [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(directory),
            "--logfile", str(directory / "redis.log"),
            *extra,
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        for attempt in range(ATTEMPTS):
            try:
                self.start()
                return
            except ServerExited:
                if port is not None or attempt == ATTEMPTS - 1:
                    raise
                self.port = free_port()  # taken since it was chosen: try another
                self.args[self.args.index("--port") + 1] = str(self.port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        """Start the process and wait until it, not another server, answers on the port."""
        process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.process = process

        def ready() -> bool:
            if process.poll() is not None:
                raise ServerExited(
                    f"redis-server on port {self.port} exited with status {process.returncode}"
                    f" while starting: {_log_tail(self.directory / 'redis.log')}"
                )
            return _server_pid(self.port) == process.pid

        try:
            wait_until(ready, 10, f"redis-server on port {self.port} (pid {process.pid})")
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        """Kill the server by pid, as a crash would, and reap it."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None
