"""The benchmark's own redis-server: the tests' ``RedisServer`` (``tests/servers.py``, on the
harness of ``tests/processes.py``), started on a free 127.0.0.1 port and stopped by its pid.

The server runs in a temporary directory with persistence off, in its own session so that a
Ctrl-C in the terminal reaches the benchmark (which then stops the server) rather than the server
directly. ``RedisServer`` is a context manager; leaving it, normally or by an exception
(``KeyboardInterrupt`` included), terminates the process by pid, waits for it and deletes the
directory.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import redis
from tests import servers

#: Commands that are the benchmark's own bookkeeping, never a library's work.
BOOKKEEPING = ("config", "info", "hello", "client", "select", "script", "ping", "flushdb", "scan")
#: Commands that run a script: their time includes every command the script calls.
SCRIPTS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")


class RedisServer(servers.RedisServer):
    """One ``redis-server`` on 127.0.0.1 of the benchmark's own, with a client for its
    bookkeeping (``admin``), for the length of a ``with`` block."""

    own_session = True

    def __init__(self) -> None:
        self._directory = tempfile.TemporaryDirectory(prefix="ratekeeper-bench-redis-")
        self._admin: redis.Redis | None = None
        try:
            super().__init__(Path(self._directory.name))
        except BaseException:
            self._directory.cleanup()
            raise
        self._admin = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    @property
    def admin(self) -> redis.Redis:
        """A client of the benchmark's own, for bookkeeping (stats, memory, flushes)."""
        if self._admin is None:
            raise RuntimeError("the server is not running")
        return self._admin

    def stop(self) -> None:
        """Terminate the server by pid (then kill it if it lingers), reap it, and delete its
        directory."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        super().stop()
        self._directory.cleanup()

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
