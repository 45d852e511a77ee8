"""Real StatsD listeners for the tests: a TCP server reading ``\\n``-ended lines, and a UDP one
reading datagrams, each on a free loopback port, in a thread of its own."""

from __future__ import annotations

import re
import socket
import socketserver
import threading
import time
from collections import Counter

_COUNTER = re.compile(r"^(?P<name>[^:]+):(?P<value>\d+)\|c(?:\|#(?P<tags>[^|]*))?(?:\|.*)?$")


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.batches: list[bytes] = []  # what each read returned (TCP) or each datagram (UDP)
        self._lock = threading.Lock()

    def add(self, data: bytes) -> None:
        with self._lock:
            self.batches.append(data)
            self.lines.extend(line for line in data.decode("utf-8").split("\n") if line)

    def counts(self) -> Counter[str]:
        """Each counter's total over the lines read: ``name`` (``name|#tags`` with tags)."""
        total: Counter[str] = Counter()
        with self._lock:
            for line in self.lines:
                found = _COUNTER.match(line)
                assert found is not None, f"not a StatsD counter line: {line!r}"
                name = found["name"] + (f"|#{found['tags']}" if found["tags"] else "")
                total[name] += int(found["value"])
        return total

    def wait_for(self, name: str, value: int, timeout: float = 15.0) -> Counter[str]:
        """The counts once ``name`` reached ``value`` (AssertionError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            counts = self.counts()
            if counts[name] >= value:
                return counts
            time.sleep(0.05)
        raise AssertionError(f"{name} never reached {value}: {dict(self.counts())}")


class TcpLines(_Lines):
    """A TCP StatsD listener: ``.port``, ``.lines``, ``.connections``; ``close()``."""

    def __init__(self) -> None:
        super().__init__()
        self.connections = 0
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                owner.connections += 1
                pending = b""
                while data := self.request.recv(1 << 16):
                    pending += data
                    complete, _, pending = pending.rpartition(b"\n")
                    if complete:
                        owner.add(complete + b"\n")

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class UdpLines(_Lines):
    """A UDP (DogStatsD) listener: ``.port``, ``.lines``; ``close()``."""

    def __init__(self) -> None:
        super().__init__()
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self._running = True
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while self._running:
            try:
                data = self.socket.recv(65_536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.add(data)

    def close(self) -> None:
        self._running = False
        self._thread.join()
        self.socket.close()
