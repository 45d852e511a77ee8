"""Real servers for the tests: started on free loopback ports, stopped by pid.

Each is a ``ServerProcess`` of ``tests/processes.py``, the harness the benchmarks share; its
helpers (``free_port``, ``free_ports``, ``wait_until``, ``wait_for``) are importable from here
too. Nothing here mocks a server. Each server runs in a temporary directory and is killed (and
waited for) when its fixture ends, so that no test leaves a process behind. ``RedisServer`` is
one standalone server; ``RedisCluster`` is six of them forming a real Redis Cluster. Both talk
to the servers over a few lines of RESP (``command``), so they need no client library.
``PostgresServer`` is one PostgreSQL server in a fresh data directory, checked with
``pg_isready``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from tests.processes import (
    ATTEMPTS,
    ServerExited,
    ServerProcess,
    children,
    free_port,
    free_ports,
    running,
    wait_for,
    wait_until,
)

#: What the tests import from here: the servers, and the harness's helpers with them.
__all__ = [
    "ATTEMPTS",
    "SLOTS",
    "ClusterEntry",
    "PostgresServer",
    "RedisCluster",
    "RedisServer",
    "ReplyError",
    "ServerExited",
    "ServerProcess",
    "cluster_info",
    "command",
    "free_port",
    "free_ports",
    "info",
    "postgres_bin",
    "wait_for",
    "wait_until",
]


class ReplyError(RuntimeError):
    """An error reply (``-ERR ...``) from a server."""


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


def _fields(text: str) -> dict[str, str]:
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line[1:])


def info(port: int, section: str) -> dict[str, str]:
    """``INFO section`` as a dict."""
    return _fields(command(port, "INFO", section))


def cluster_info(port: int) -> dict[str, str]:
    """``CLUSTER INFO`` as a dict."""
    return _fields(command(port, "CLUSTER", "INFO"))


def _server_pid(port: int) -> int | None:
    """The pid of the redis-server answering on ``port``, or None if none answers (yet)."""
    try:
        return int(info(port, "server")["process_id"])
    except (OSError, ReplyError, KeyError, ValueError):
        return None


class RedisServer(ServerProcess):
    """One ``redis-server`` process on 127.0.0.1; ``config`` is a file read first (a
    sentinel's), ``extra`` more command-line options. With ``unix_socket`` (a path), it
    listens on that Unix socket too (``unix_url``)."""

    name = "redis-server"
    #: Whether it runs in a session of its own, out of reach of a Ctrl-C in the terminal (the
    #: benchmarks' servers: the benchmark, not the terminal, stops them).
    own_session = False

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        *extra: str,
        config: Path | None = None,
        unix_socket: Path | None = None,
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed; scripts/test.sh and scripts/bench.sh install it"
            )
        self.binary = binary
        self.port = port or free_port()
        self.directory = directory
        self.unix_socket = unix_socket
        if unix_socket is not None:  # a socket's path holds at most 107 bytes
            extra = ("--unixsocket", str(unix_socket), "--unixsocketperm", "700", *extra)
        self.extra = extra
        self.config = config
        directory.mkdir(parents=True, exist_ok=True)
        self.start_on_free_port(fixed=port is not None)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def unix_url(self) -> str:
        """``unix:///path?db=0``: the server on its Unix socket."""
        if self.unix_socket is None:
            raise ValueError("this server listens on no Unix socket")
        return f"unix://{self.unix_socket}?db=0"

    def _launch(self) -> subprocess.Popen[bytes]:
        args = [
            self.binary,
            *([str(self.config)] if self.config is not None else []),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
            "--logfile", str(self._log()),
            *self.extra,
        ]  # fmt: skip
        return subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=self.own_session,
        )

    def _answers(self, pid: int) -> bool:
        return _server_pid(self.port) == pid

    def _log(self) -> Path:
        return self.directory / "redis.log"


#: Every Redis Cluster has this many hash slots.
SLOTS = 16384


class ClusterEntry(NamedTuple):
    """One line of ``CLUSTER NODES``, as one node sees another."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slots: int

    @property
    def failing(self) -> bool:
        return bool(self.flags & {"fail", "fail?", "noaddr", "handshake"})


def _cluster_view(port: int) -> list[ClusterEntry]:
    """``CLUSTER NODES`` as the node on ``port`` sees the cluster."""
    entries = []
    for line in command(port, "CLUSTER", "NODES").splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        slots = 0
        for part in fields[8:]:
            if part.startswith("["):  # a slot being migrated or imported
                continue
            first, _, last = part.partition("-")
            slots += int(last or first) - int(first) + 1
        address = fields[1].split("@")[0]
        entries.append(
            ClusterEntry(
                node_id=fields[0],
                port=int(address.rsplit(":", 1)[1]),
                flags=frozenset(fields[2].split(",")),
                master_id=None if fields[3] == "-" else fields[3],
                slots=slots,
            )
        )
    return entries


def _unhealthy(port: int, state: dict[str, str]) -> list[str]:
    """What is wrong with one node's CLUSTER INFO: its state, or slots not served."""
    found = []
    if state.get("cluster_state") != "ok":
        found.append(f"node {port} has cluster_state:{state.get('cluster_state')}")
    if state.get("cluster_slots_ok") != str(SLOTS):
        found.append(f"node {port} has cluster_slots_ok:{state.get('cluster_slots_ok')}")
    return found


class RedisCluster:
    """A real Redis Cluster on 127.0.0.1: ``masters`` masters with ``replicas`` replicas each.

    Every node is a ``RedisServer`` with ``--cluster-enabled yes``, its own ``nodes.conf`` in
    its own directory, and its cluster bus on a second free port (``--cluster-port``, so that
    ``port + 10000`` need not be free or even valid). ``--cluster-node-timeout`` is
    ``node_timeout_ms`` (1 s by default), so that a dead master is failed over within a few
    seconds; ``--cluster-replica-validity-factor 0`` lets a replica take over however long
    it has been out of touch with its master, and ``--repl-diskless-sync-delay 0`` lets
    replicas sync at once instead of after 5 s. The cluster is created with
    ``redis-cli --cluster create`` and the constructor returns once every node reports
    ``cluster_state:ok`` with all 16384 slots served, sees the full topology, and every
    replica's link to its master is up.
    """

    def __init__(
        self,
        directory: Path,
        *,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
        timeout: float = 60.0,
    ) -> None:
        self.directory = directory
        self.expected_masters = masters
        self.replicas_per_master = replicas
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []
        self.node_ids: dict[int, str] = {}  # port -> cluster node id
        #: node id -> id of the master it replicates (None for a master), when last settled.
        self._topology: dict[str, str | None] = {}
        try:
            for index in range(masters * (1 + replicas)):
                self.nodes.append(self._start_node(directory / f"node-{index}"))
            self._create()
            for node in self.nodes:
                self.node_ids[node.port] = command(node.port, "CLUSTER", "MYID")
            wait_for(self._startup_problems, timeout, "redis cluster")
        except BaseException:
            self.stop()
            raise
        self._topology = self._roles()

    # -- addresses -------------------------------------------------------------------------

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", node.port) for node in self.nodes]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in self.startup_nodes)

    # -- topology --------------------------------------------------------------------------

    def alive(self) -> list[RedisServer]:
        """The nodes whose process is running."""
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def view(self) -> list[ClusterEntry]:
        """``CLUSTER NODES`` as the first live node that answers sees it."""
        errors = []
        for node in self.alive():
            try:
                return _cluster_view(node.port)
            except (OSError, ReplyError) as error:
                errors.append(f"{node.port}: {error}")
        raise RuntimeError("no live cluster node answers CLUSTER NODES: " + "; ".join(errors))

    def masters(self) -> list[RedisServer]:
        """The nodes the cluster holds as masters now (flagged master and not failing)."""
        return self._nodes_of(e for e in self.view() if "master" in e.flags and not e.failing)

    def replicas(self) -> list[RedisServer]:
        """The nodes the cluster holds as replicas now (flagged slave and not failing)."""
        return self._nodes_of(e for e in self.view() if "slave" in e.flags and not e.failing)

    def node(self, node_id: str) -> RedisServer:
        return next(n for n in self.nodes if self.node_ids[n.port] == node_id)

    def _nodes_of(self, entries: Iterable[ClusterEntry]) -> list[RedisServer]:
        by_port = {node.port: node for node in self.nodes}
        return [by_port[e.port] for e in entries if e.port in by_port]

    def _roles(self) -> dict[str, str | None]:
        return {e.node_id: e.master_id for e in self.view() if not e.failing}

    # -- failures --------------------------------------------------------------------------

    def wait_for_replicas(self, master: RedisServer, timeout: float = 10.0) -> None:
        """Wait until every replica of ``master`` is online and has applied every write the
        master took so far (its replication offset reached the master's). ``WAIT`` cannot
        tell this from another connection: it waits only for that connection's own writes."""
        target = int(info(master.port, "replication")["master_repl_offset"])

        def caught_up() -> bool:
            fields = info(master.port, "replication")
            replicas = [
                dict(part.split("=", 1) for part in value.split(","))
                for name, value in fields.items()
                if name.startswith("slave") and name[5:].isdigit()
            ]
            return bool(replicas) and all(
                one["state"] == "online" and int(one["offset"]) >= target for one in replicas
            )

        wait_until(caught_up, timeout, f"the replicas of {master.port} to catch up")

    def kill(self, node: RedisServer) -> None:
        """Kill ``node`` by pid with SIGKILL, as a crash would, and reap it."""
        node.kill()

    def wait_for_failover(self, old_master: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Wait until a replica of the dead ``old_master`` is promoted and every live node
        reports ``cluster_state:ok`` again; return the promoted node."""
        old_id = self.node_ids[old_master.port]
        heirs = {node_id for node_id, master in self._topology.items() if master == old_id}
        if not heirs:
            raise RuntimeError(f"node {old_master.port} had no replica to fail over to")
        promoted: list[RedisServer] = []

        def problems() -> list[str]:
            found = []
            for node in self.alive():
                port = node.port
                try:
                    state = cluster_info(port)
                    entries = {e.node_id: e for e in _cluster_view(port)}
                except (OSError, ReplyError) as error:
                    found.append(f"node {port} does not answer: {error}")
                    continue
                found += _unhealthy(port, state)
                old = entries.get(old_id)
                if old is not None and "fail" not in old.flags:
                    found.append(f"node {port} does not see {old_master.port} as failed yet")
                heir = [i for i in heirs if i in entries and "master" in entries[i].flags]
                if not heir or entries[heir[0]].slots == 0:
                    found.append(f"node {port} sees no replica of {old_master.port} promoted")
                else:
                    promoted[:] = [self.node(heir[0])]
            return found

        wait_for(problems, timeout, f"failover of master {old_master.port}")
        self._topology = self._roles()
        return promoted[0]

    def stop(self) -> None:
        """Stop every node by pid (SIGTERM, then SIGKILL if it lingers)."""
        for node in self.nodes:
            node.signal_stop()
        for node in self.nodes:
            node.stop()

    # -- startup ---------------------------------------------------------------------------

    def _start_node(self, directory: Path) -> RedisServer:
        config = directory / "nodes.conf"
        for attempt in range(ATTEMPTS):
            port, bus = free_ports(2)
            config.unlink(missing_ok=True)  # a failed start may have written one
            try:
                return RedisServer(
                    directory,
                    port,
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(config),
                    "--cluster-port", str(bus),
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--cluster-replica-validity-factor", "0",
                    "--repl-diskless-sync-delay", "0",
                )  # fmt: skip
            except ServerExited:
                if attempt == ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _create(self) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed; scripts/test.sh installs it")
        args = [cli, "--cluster", "create", *(f"{h}:{p}" for h, p in self.startup_nodes)]
        args += ["--cluster-replicas", str(self.replicas_per_master), "--cluster-yes"]
        try:
            result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        except subprocess.TimeoutExpired as error:
            raise TimeoutError(f"redis-cli --cluster create took over 60s: {error}") from error
        if result.returncode != 0:
            raise RuntimeError(
                f"redis-cli --cluster create failed with status {result.returncode}:\n"
                + result.stdout[-2000:]
                + result.stderr[-2000:]
            )

    def _startup_problems(self) -> list[str]:
        found = []
        want_replicas = self.expected_masters * self.replicas_per_master
        for node in self.nodes:
            port = node.port
            try:
                state = cluster_info(port)
                entries = _cluster_view(port)
                replication = info(port, "replication")
            except (OSError, ReplyError) as error:
                found.append(f"node {port} does not answer: {error}")
                continue
            found += _unhealthy(port, state)
            healthy = [e for e in entries if not e.failing]
            masters = {e.node_id for e in healthy if "master" in e.flags and e.slots}
            replicas = [e for e in healthy if "slave" in e.flags and e.master_id in masters]
            if len(masters) != self.expected_masters or len(replicas) != want_replicas:
                found.append(
                    f"node {port} sees {len(masters)} masters and {len(replicas)} replicas"
                )
            if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                found.append(f"replica {port} has its link to its master down")
        return found


def postgres_bin() -> Path | None:
    """The directory of PostgreSQL's server programs: on PATH, or Debian's
    ``/usr/lib/postgresql/<version>/bin`` (newest first), which is not on PATH."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found is not None else []
    candidates += [
        Path(directory)
        for directory in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    ]
    for directory in candidates:
        if all((directory / name).exists() for name in ("initdb", "postgres", "pg_isready")):
            return directory
    return None


def _version(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in path.split("/")[-2].split(".") if part.isdigit())


class PostgresServer(ServerProcess):
    """One PostgreSQL server on 127.0.0.1, in a fresh data directory, with fsync on.

    PostgreSQL refuses to run as root, so when the tests run as root the server (and
    ``initdb``) run as the ``postgres`` user, in a directory of their own under the system
    temporary directory (pytest's own temporary directories are private to root). ``url`` is
    a DSN for the ``postgres`` superuser, trusted on loopback. ``stop`` is a fast shutdown
    (SIGINT) by pid; ``start`` starts it again on the same port with the same data.
    """

    name = "postgres"
    stop_signal = signal.SIGINT  # fast shutdown: roll back sessions, checkpoint, exit
    stop_timeout = 30.0
    ready_timeout = 60.0

    def __init__(self) -> None:
        binaries = postgres_bin()
        if binaries is None:
            raise RuntimeError("PostgreSQL is not installed; scripts/test.sh installs it")
        self.bin = binaries
        self.as_user: dict[str, Any] = (
            {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}
        )
        self.directory = Path(tempfile.mkdtemp(prefix="ratekeeper-postgres-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        if self.as_user:
            shutil.chown(self.directory, "postgres", "postgres")
        self.port = free_port()
        try:
            self._initdb()
            self.start_on_free_port()
        except BaseException:
            self.remove()
            raise

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _initdb(self) -> None:
        args = [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres"]
        args += ["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"]
        result = subprocess.run(
            args, capture_output=True, text=True, timeout=120, check=False,
            cwd=self.directory, **self.as_user,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed ({result.returncode}): {result.stderr[-2000:]}")

    def _launch(self) -> subprocess.Popen[bytes]:
        args = [
            str(self.bin / "postgres"),
            "-D", str(self.data),
            "-p", str(self.port),
            "-k", str(self.directory),
            "-c", "listen_addresses=127.0.0.1",
            "-c", "fsync=on",
            "-c", "synchronous_commit=on",
            "-c", "shared_buffers=16MB",
            "-c", "max_connections=100",
        ]  # fmt: skip
        with self.log.open("ab") as log:
            return subprocess.Popen(
                args, stdout=log, stderr=log, cwd=self.directory, **self.as_user
            )

    def kill(self) -> None:
        """Kill the whole server by pid, as a crash of its machine would: the postmaster and
        every backend (a backend outlives a killed postmaster for a while, and would go on
        answering its open connection)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGSTOP)  # so that it starts no backend meanwhile
            backends = children(self.process.pid)
            os.kill(self.process.pid, signal.SIGKILL)
            for child in backends:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            self.process.wait(10)
            # Until every backend has ended, the old server's shared memory is in use, and a
            # new postmaster on this data directory refuses to start.
            wait_until(lambda: not running(backends), 10, f"the backends of postgres {self.port}")
        self.process = None

    def _answers(self, pid: int) -> bool:
        check = [str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        return subprocess.run(check, check=False, timeout=10).returncode == 0

    def _log(self) -> Path:
        return self.log

    def remove(self) -> None:
        """Stop the server and delete its data directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
