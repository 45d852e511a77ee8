"""The benchmark's own redis-server: started on a free 127.0.0.1 port, stopped by its pid.

The server runs in a temporary directory with persistence off, in its own session so that a
Ctrl-C in the terminal reaches the benchmark (which then stops the server) rather than the server
directly. ``RedisServer`` is a context manager; leaving it, normally or by an exception
(``KeyboardInterrupt`` included), terminates the process by pid and waits for it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

#: Commands that are the benchmark's own bookkeeping, never a library's work.
BOOKKEEPING = ("config", "info", "hello", "client", "select", "script", "ping", "flushdb", "scan")
#: Commands that run a script: their time includes every command the script calls.
SCRIPTS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` on 127.0.0.1, for the length of a ``with`` block."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._directory: tempfile.TemporaryDirectory[str] | None = None
        self._admin: redis.Redis | None = None

    @property
    def admin(self) -> redis.Redis:
        """A client of the benchmark's own, for bookkeeping (stats, memory, flushes)."""
        if self._admin is None:
            raise RuntimeError("the server is not running")
        return self._admin

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisServer:
        self._directory = tempfile.TemporaryDirectory(prefix="ratekeeper-bench-redis-")
        for _ in range(5):  # a port chosen free can be taken before the server binds it
            self.port = free_port()
            if self._start(Path(self._directory.name)):
                return self
        self.stop()
        raise RuntimeError("redis-server did not start on a free port in 5 attempts")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _start(self, directory: Path) -> bool:
        log = directory / f"redis-{self.port}.log"
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(directory),
            "--logfile", str(log),
        ]  # fmt: skip
        process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.process = process
        admin = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if process.poll() is not None:
                admin.close()
                self.process = None
                return False
            try:
                # Our server, not another one that took the port meanwhile.
                if int(admin.info("server")["process_id"]) == process.pid:
                    self._admin = admin
                    return True
            except (redis.RedisError, OSError, KeyError, ValueError):
                pass
            time.sleep(0.02)
        admin.close()
        self.stop()
        return False

    def stop(self) -> None:
        """Terminate the server by pid (then kill it if it lingers) and reap it."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None

    # --- what the benchmark asks of the server, on its own connection ---

    def version(self) -> str:
        return str(self.admin.info("server")["redis_version"])

    def flush(self) -> None:
        self.admin.flushdb()

    def used_memory(self) -> int:
        return int(self.admin.info("memory")["used_memory"])

    def reset_stats(self) -> None:
        self.admin.config_resetstat()

    def commandstats(self) -> dict[str, dict[str, Any]]:
        """``INFO commandstats`` by command name, the benchmark's own commands left out."""
        stats = self.admin.info("commandstats")
        out = {}
        for name, values in stats.items():
            command = name.removeprefix("cmdstat_")
            if command.split("|")[0] not in BOOKKEEPING:
                out[command] = values
        return out


def server_usec(stats: dict[str, dict[str, Any]]) -> tuple[float, int]:
    """Server time spent (µs) and the number of top-level calls, from ``commandstats``.

    A script's time already includes the commands it calls, which ``commandstats`` counts
    again under their own names; so when scripts ran, only the scripts count. A library that
    mixes scripts and plain commands is counted for its scripts alone.
    """
    scripts = {name: values for name, values in stats.items() if name in SCRIPTS}
    chosen = scripts or stats
    usec = sum(float(values["usec"]) for values in chosen.values())
    calls = sum(int(values["calls"]) for values in chosen.values())
    return usec, calls
