"""The one process harness of the tests and the benchmarks: a server process started on free
loopback ports, ready once it (not another process) answers, stopped by pid, and its log's last
lines in every error about it.

``ServerProcess`` is the base of every server the tests start (``tests/servers.py``,
``tests/gateways.py``) and of the benchmarks' (``benchmarks/``). A subclass says how to launch
its process (``_launch``), how to tell that this process answers (``_answers``), and where its
log is (``_log``); the base waits for it, starts it again on fresh ports when the ones chosen
were taken meanwhile, and stops it by pid (``stop_signal``, then SIGKILL if it lingers). It is
a context manager too: leaving the ``with`` block, normally or by an exception, stops it.

Nothing here imports beyond the standard library, so that the benchmarks, run from the
repository's root (``python -m benchmarks``), import it as the tests do.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

#: How many times a server is started on fresh ports when the last ones were taken meanwhile.
ATTEMPTS = 5
#: The lowest port ``free_ports`` hands out; the highest is below the kernel's ephemeral range.
LOWEST = 10_000
#: How long a port handed out stays reserved: enough for its server to start listening on it.
HOLD = 120.0
#: The ports handed out lately, by every process of this user on this machine ("port:time").
RESERVED = Path(tempfile.gettempdir()) / f"ratekeeper-test-ports-{os.getuid()}"
#: How many of its log's last lines an error about a server shows.
LOG_LINES = 10


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that nothing is bound to, and that no process using
    this harness on this machine (another pytest-xdist worker, another lane, a benchmark) was
    given in the last ``HOLD`` seconds.

    They are drawn at random below the kernel's ephemeral range (``ip_local_port_range``, where
    ``bind(0)`` and every outgoing connection take their ports), so that no connection a test
    opens holds a port a server is about to listen on; and they are written down in
    ``RESERVED`` (under a lock) until their servers have had time to listen on them, so that
    two servers started at once, by one process or by two, are never given the same port.
    """
    low, high = _port_range()
    with _reservations() as reserved:
        chosen: list[int] = []
        for _ in range(100 * count):
            port = random.randrange(low, high)
            if port not in reserved and port not in chosen and _unbound(port):
                chosen.append(port)
                if len(chosen) == count:
                    break
        else:
            raise RuntimeError(f"no {count} free loopback ports in {low}-{high - 1}")
        reserved.update(dict.fromkeys(chosen, time.time()))
    return chosen


def _port_range() -> tuple[int, int]:
    """Where ``free_ports`` draws from: from ``LOWEST`` up to the kernel's ephemeral range, or
    every unprivileged port if that range starts too low to leave room below it."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        ephemeral = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768  # Linux's default
    if ephemeral - LOWEST < 4096:
        return 1024, 65536
    return LOWEST, ephemeral


def _unbound(port: int) -> bool:
    """Whether a socket can bind ``port`` on 127.0.0.1 now (without SO_REUSEADDR, so that a
    port whose last connections are still closing is left alone too)."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _reservations() -> Iterator[dict[int, float]]:
    """The ports reserved in ``RESERVED``, less those older than ``HOLD``, locked against every
    other process until the block ends; what the block adds is written back."""
    with RESERVED.open("a+", encoding="ascii") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes
        file.seek(0)
        now = time.time()
        reserved: dict[int, float] = {}
        for entry in file.read().split():
            port, _, when = entry.partition(":")
            with contextlib.suppress(ValueError):
                if now - float(when) < HOLD:
                    reserved[int(port)] = float(when)
        yield reserved
        file.seek(0)
        file.truncate()
        file.write(" ".join(f"{port}:{when:.1f}" for port, when in reserved.items()))


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait until ``check()`` is true, polling every 20 ms."""
    wait_for(lambda: [] if check() else ["not yet"], timeout, what, interval=0.02)


def wait_for(
    problems: Callable[[], list[str]], timeout: float, what: str, interval: float = 0.05
) -> None:
    """Wait until ``problems()`` is empty; on timeout, name what was still not ready."""
    deadline = time.monotonic() + timeout
    left = problems()
    while left:
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not ready after {timeout}s: " + "; ".join(left))
        time.sleep(interval)
        left = problems()


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes, from ``/proc``, in order."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.split("/")[2]))
    return sorted(found)


def running(pids: list[int]) -> list[int]:
    """Those of ``pids`` whose process still runs (exists, and is no zombie)."""
    found = []
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # ended and reaped
            continue
        if text[text.rindex(")") + 2] not in "ZX":
            found.append(pid)
    return found


def log_tail(path: Path, lines: int = LOG_LINES) -> str:
    """The last ``lines`` lines of the log at ``path``, on one line (``" | "`` between them)."""
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(empty log)"
    except OSError:
        return "(no log)"


class ServerError(RuntimeError):
    """A server did not start: it exited, or did not answer in time. The message ends with the
    last lines of its log."""


class ServerExited(ServerError):
    """A server process ended while starting, typically because its port was taken."""


class ServerNotReady(ServerError, TimeoutError):
    """A server process still runs but did not answer within its ``ready_timeout``."""


class ServerProcess:
    """One server process on 127.0.0.1.

    ``start`` launches it and waits until it, not another server, answers on its port; a
    server that exits while starting raises ``ServerExited`` (its port was taken, typically),
    and ``start_on_free_port`` then tries again on other ports. ``launch`` and ``wait_ready``
    are the two halves of ``start``, so that several servers start at once and are then waited
    for. ``stop`` sends ``stop_signal`` by pid and kills it if it lingers; ``kill`` is SIGKILL,
    as a crash.
    """

    name = "server"
    stop_signal = signal.SIGTERM
    stop_timeout = 10.0
    ready_timeout = 10.0
    port: int
    process: subprocess.Popen[bytes] | None = None

    def _launch(self) -> subprocess.Popen[bytes]:
        raise NotImplementedError

    def _answers(self, pid: int) -> bool:
        """Whether the process ``pid`` answers on ``port``."""
        raise NotImplementedError

    def _log(self) -> Path:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> Self:
        """Start the server if it has not been, and wait until it answers."""
        if self.process is None:
            self.start()
        else:
            self.wait_ready()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start_on_free_port(self, fixed: bool = False) -> None:
        for attempt in range(ATTEMPTS):
            try:
                self.start()
                return
            except ServerExited:
                if fixed or attempt == ATTEMPTS - 1:
                    raise
                self._choose_ports()  # taken since they were chosen: try others

    def _choose_ports(self) -> None:
        """Choose new free ports for the next start; a server with more ports than ``port``
        chooses them all here."""
        self.port = free_port()

    def start(self) -> None:
        """Start the process and wait until it, not another server, answers on the port."""
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process, without waiting for it to answer."""
        self.process = self._launch()

    def wait_ready(self) -> None:
        """Wait until the process launched answers; kill it if it does not (``ServerExited``
        if it ended, ``ServerNotReady`` after ``ready_timeout``)."""
        process = self.process
        if process is None:
            raise ServerError(f"{self.name} on port {self.port} was not launched")

        def ready() -> bool:
            if process.poll() is not None:
                raise ServerExited(
                    f"{self.name} on port {self.port} exited with status {process.returncode}"
                    f" while starting: {log_tail(self._log())}"
                )
            return self._answers(process.pid)

        what = f"{self.name} on port {self.port} (pid {process.pid})"
        try:
            wait_until(ready, self.ready_timeout, what)
        except ServerError:
            self.kill()
            raise
        except TimeoutError as error:
            self.kill()
            raise ServerNotReady(f"{error}; its log: {log_tail(self._log())}") from None
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        """Kill the server by pid, as a crash would, and reap it."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def signal_stop(self) -> None:
        """Ask the server to stop, without waiting (so that several stop together)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, self.stop_signal)

    def stop(self) -> None:
        """Ask the server to stop (``stop_signal``), wait up to ``stop_timeout`` for it, and
        kill it if it lingers."""
        self.signal_stop()
        if self.process is not None:
            try:
                self.process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None
