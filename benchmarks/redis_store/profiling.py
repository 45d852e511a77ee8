"""Where a ratekeeper decision on Redis spends its time:
``python -m benchmarks.redis_store.profiling``.

On a redis-server of its own (as ``python -m benchmarks --redis``), for GCRA on one hot key
(sequential) and on 64 keys (64 asyncio callers, batching on):

1. wall time, client CPU time (``time.process_time``) and server time (``INFO
   commandstats``) per decision, beside the same for a raw ``EVALSHA`` of ``return 1`` (on a
   default client through redis-py's ``Script``, and sent as ratekeeper sends its scripts on
   ratekeeper's own client), and for a stub script that only returns a reply of the same shape,
   sent on ratekeeper's client with ratekeeper's key and arguments (``state_key``,
   ``limit_args``) and its reply decoded by ``scripts.decision``: the round trip and the
   client's packing and decoding, without the store's own code or the server's work. With 64
   callers, the stub is one batch of 64 (``scripts.arguments``, decoded by
   ``scripts.decisions``) sent one after another. The store itself is never altered: what it
   adds above the stub (checking the hit, choosing the entry, futures for the batching
   callers) is ratekeeper's row less the stub's, not a stage of its own;
2. the client's top functions under ``cProfile``, and its own time summed by area;
3. calls handed over one per event-loop turn (as ``grpc.aio`` hands over requests), and how
   many share a script run;
4. the server's time per script run for pieces of ratekeeper's scripts: ``return 1`` (bare,
   and given ratekeeper's key and arguments); the batch script's definitions (prelude and every
   algorithm) followed by ``return 1``; the whole batch script with no hit, one hit (also with
   ``now`` given, and as a peek), two hits and a batch of 64; and the single-hit script.

It prints plain text. Nothing here is a target; it explains the numbers of the benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable
from importlib.resources import files
from typing import Any

import redis

import ratekeeper as rk
from benchmarks.contenders import ratekeeper_limit
from benchmarks.redis_store.peers import CALLERS
from benchmarks.redis_store.server import RedisServer, server_usec
from ratekeeper.core.store_keys import state_key
from ratekeeper.stores import open_async_store, open_store
from ratekeeper.stores.redis.clients import open_client
from ratekeeper.stores.redis.scripts import (
    SINGLE,
    SOURCE,
    arguments,
    decision,
    decisions,
    limit_args,
    now_arg,
)

ALGORITHM = "gcra"
AMOUNT = 1_000_000_000
#: Seconds of socket timeout for the asyncio stores (see ``concurrent``).
TIMEOUT = 2.0
#: The row of the stub sent as one batch of every caller's hit.
STUB_BATCH = f"stub script, {CALLERS} per batch"


def _lua_parts() -> tuple[str, str]:
    """ratekeeper's batch script cut in two: every definition, and the dispatch."""
    dispatch = files("ratekeeper").joinpath("stores/redis/dispatch.lua").read_text()
    if not SOURCE.endswith("\n" + dispatch):
        raise RuntimeError("ratekeeper's batch script no longer ends with dispatch.lua")
    return SOURCE[: -len(dispatch) - 1], dispatch


#: A stand-in for ratekeeper's scripts: the same reply shape (one allowing decision per key,
#: packed as the scripts pack it), next to no server work. With it, what remains of a
#: decision's cost is the client's.
STUB = """
return string.rep(struct.pack('<Bi8i8dddi8B', 1, 1000000000, 999999999, 3.6e-06, 0, 0, 1, 0),
  #KEYS)
"""


def _timed(server: RedisServer, calls: int, run: Callable[[], None]) -> tuple[float, float, float]:
    """(wall µs, client CPU µs, server µs) per call of ``run``, which makes ``calls`` decisions."""
    server.reset_stats()
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    usec, _ = server_usec(server.commandstats())
    return wall / calls * 1e6, cpu / calls * 1e6, usec / calls


def _area(key: tuple[str, int, str]) -> str:
    filename, _, name = key
    if "/ratekeeper/" in filename:
        return "ratekeeper"
    if "/redis/" in filename:
        return "redis-py"
    if "asyncio" in filename:
        return "asyncio"
    if any(word in name for word in ("recv", "send", "poll", "select")):
        return "socket I/O and waiting (syscalls)"
    if "/benchmarks/" in filename:
        return "benchmark loop"
    return "other"


def _profile_text(profile: cProfile.Profile, top: int) -> str:
    """The top functions by own time, then own time summed by area."""
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    lines = text.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls"))
    total = next(line for line in lines if "function calls" in line)
    areas: dict[str, float] = {}
    for key, value in stats.stats.items():  # type: ignore[attr-defined]
        areas[_area(key)] = areas.get(_area(key), 0.0) + value[2]
    whole = sum(areas.values())
    shares = [
        f"  {area:36} {seconds:7.3f} s  {seconds / whole:6.1%}"
        for area, seconds in sorted(areas.items(), key=lambda item: -item[1])
    ]
    top_lines = [line for line in lines[start:] if line.strip()]
    return "\n".join([total.strip(), *top_lines, "", "own time by area:", *shares])


def sequential(server: RedisServer, calls: int, top: int, rounds: int) -> None:
    limit = ratekeeper_limit(ALGORITHM, AMOUNT)
    store = open_store(server.url, on_store_error=None, prefix="prof")
    floor_client = redis.Redis.from_url(server.url)
    floor = floor_client.register_script("return 1")
    # The same script sent as ratekeeper sends its own (``execute_command``), on a client
    # opened as ratekeeper opens its own (its connection class, packer, socket timeout, no
    # retries); and on it the stub, given a single hit's key and arguments as ratekeeper
    # builds them, its reply decoded as ratekeeper decodes it.
    own_client = open_client(server.url, asyncio=False)
    own_sha = own_client.script_load("return 1")
    stub_sha = own_client.script_load(STUB)

    def own_floor() -> None:
        own_client.execute_command("EVALSHA", own_sha, 0)

    def stub_hit() -> None:
        args = (state_key(limit, "hot", "stub"), now_arg(None), "1", *limit_args(limit))
        decision(own_client.execute_command("EVALSHA", stub_sha, 1, *args))

    runs: dict[str, Callable[[], None]] = {}
    hit = rk.Limiter(store).hit
    hit("hot", limit)

    def run_ratekeeper() -> None:
        for _ in range(calls):
            hit("hot", limit)

    def run_stub() -> None:
        for _ in range(calls):
            stub_hit()

    runs["ratekeeper"] = run_ratekeeper
    runs["stub script, ratekeeper's args"] = run_stub

    def run_floor() -> None:
        for _ in range(calls):
            floor()

    def run_own_floor() -> None:
        for _ in range(calls):
            own_floor()

    runs["EVALSHA return 1"] = run_floor
    runs["return 1, ratekeeper's client"] = run_own_floor
    floor()
    own_floor()
    stub_hit()
    print(f"== sequential, {ALGORITHM}, one hot key, {calls:,} calls; median of {rounds} rounds")
    measured: dict[str, list[tuple[float, float, float]]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            measured[name].append(_timed(server, calls, run))
    print(f"{'per decision':30} {'wall µs':>8} {'client CPU µs':>14} {'server µs':>10}")
    for name, values in measured.items():
        wall, cpu, usec = (statistics.median(column) for column in zip(*values, strict=True))
        print(f"{name:30} {wall:8.1f} {cpu:14.1f} {usec:10.1f}")
    for name, run in runs.items():
        profile = cProfile.Profile()
        profile.runcall(run)
        print(f"\n-- cProfile, {name} (sorted by own time)")
        print(_profile_text(profile, top if name == "ratekeeper" else 6))
    store.close()
    own_client.close()
    floor_client.close()


def concurrent(server: RedisServer, per_caller: int, top: int, rounds: int) -> None:
    async def main() -> None:
        limit = ratekeeper_limit(ALGORITHM, AMOUNT)
        url = server.url
        # A timeout longer than the default 0.25 s: without batching, 64 script runs queue on
        # the server, and on a loaded machine the last of them can take longer than that.
        options: dict[str, Any] = {"on_store_error": None, "timeout": TIMEOUT}
        variants: dict[str, Any] = {
            "batching on": open_async_store(url, prefix="prof", **options),
            "batching off": open_async_store(url, prefix="prof", batch=False, **options),
        }
        decisions_made = CALLERS * per_caller
        measured: dict[str, list[tuple[float, float, float, float]]] = {}
        callers: dict[str, Callable[[], Any]] = {}
        for name, store in variants.items():
            hit = rk.AsyncLimiter(store).hit

            async def caller(key: str, hit: Any = hit) -> None:
                for _ in range(per_caller):
                    await hit(key, limit)

            async def gathered(caller: Any = caller) -> None:
                await asyncio.gather(*(caller(f"user:{i}") for i in range(CALLERS)))

            await gathered()  # warm-up: connections, keys
            callers[name] = gathered
            measured[name] = []
        # The stub as one batch of every caller's hit, built and decoded as ratekeeper's batches
        # are, the batches sent one after another on a client opened as ratekeeper's.
        stub_client = open_client(url, asyncio=True, timeout=TIMEOUT)
        stub_sha = await stub_client.script_load(STUB)
        keys = [state_key(limit, f"user:{i}", "stub") for i in range(CALLERS)]

        async def stub_batches() -> None:
            for _ in range(per_caller):
                argv = arguments([(limit, 1)] * CALLERS, None, False)
                reply = await stub_client.execute_command(
                    "EVALSHA", stub_sha, CALLERS, *keys, *argv
                )
                decisions(reply)

        await stub_batches()  # warm-up
        callers[STUB_BATCH] = stub_batches
        measured[STUB_BATCH] = []
        for _ in range(rounds):
            for name, gathered in callers.items():
                server.reset_stats()
                wall, cpu = time.perf_counter(), time.process_time()
                await gathered()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                usec, runs = server_usec(server.commandstats())
                measured[name].append((wall, cpu, usec, runs))
        print(f"{'':26} {'decisions/s':>11} {'wall µs':>8} {'client CPU µs':>14} {'server µs':>10}")
        for name, values in measured.items():
            wall, cpu, usec, runs = (statistics.median(c) for c in zip(*values, strict=True))
            print(
                f"{name:26} {decisions_made / wall:11,.0f} {wall / decisions_made * 1e6:8.1f} "
                f"{cpu / decisions_made * 1e6:14.1f} {usec / decisions_made:10.1f}   "
                f"{decisions_made / max(runs, 1):.1f} decisions per script run, "
                f"{usec / max(runs, 1):.0f} µs per run"
            )
        profile = cProfile.Profile()
        profile.enable()
        await callers["batching on"]()
        profile.disable()
        print("\n-- cProfile, batching on (sorted by own time)")
        print(_profile_text(profile, top))
        for store in variants.values():
            await store.close()
        await stub_client.aclose()

    print(
        f"\n== {CALLERS} concurrent asyncio callers, {ALGORITHM}, one key each, {per_caller} hits "
        f"each; median of {rounds} rounds; per decision"
    )
    asyncio.run(main())


def one_per_turn(server: RedisServer, calls: int, rounds: int) -> None:
    """Calls handed over one per event-loop turn, as ``grpc.aio`` hands over its requests: a
    new task every turn, up to ``CALLERS`` outstanding, on ``CALLERS`` keys in turn."""

    async def main() -> None:
        limit = ratekeeper_limit(ALGORITHM, AMOUNT)
        store = open_async_store(server.url, prefix="turn", on_store_error=None, timeout=TIMEOUT)
        hit = rk.AsyncLimiter(store).hit

        async def run() -> None:
            room = asyncio.Semaphore(CALLERS)

            async def one(key: str) -> None:
                try:
                    await hit(key, limit)
                finally:
                    room.release()

            tasks = []
            for i in range(calls):
                await room.acquire()
                tasks.append(asyncio.ensure_future(one(f"user:{i % CALLERS}")))
                await asyncio.sleep(0)  # the next call comes in the next turn
            await asyncio.gather(*tasks)

        await run()  # warm-up
        measured = []
        for _ in range(rounds):
            server.reset_stats()
            wall = time.perf_counter()
            await run()
            wall = time.perf_counter() - wall
            measured.append((wall, *server_usec(server.commandstats())))
        await store.close()
        wall, usec, runs = (statistics.median(c) for c in zip(*measured, strict=True))
        print(
            f"{calls / wall:,.0f} decisions/s, {calls / max(runs, 1):.1f} decisions per script "
            f"run, {usec / calls:.1f} server µs per decision"
        )

    print(
        f"\n== one call per event-loop turn, {ALGORITHM}, up to {CALLERS} outstanding, "
        f"{calls} calls; median of {rounds} rounds"
    )
    asyncio.run(main())


def server_side(server: RedisServer, calls: int, rounds: int) -> None:
    """The server's µs per script run for pieces of ratekeeper's script (median of rounds)."""
    client = redis.Redis.from_url(server.url)
    definitions, _ = _lua_parts()
    limit = ratekeeper_limit(ALGORITHM, AMOUNT)

    def hits(count: int, cost: int = 1, now: float | None = None) -> tuple[list[str], list[str]]:
        keys = [f"prof:1:{{x{i}}}" for i in range(count)]
        return keys, arguments([(limit, cost)] * count, now, False)

    def single(now: float | None = None) -> tuple[list[str], list[str]]:
        return ["prof:1:{single}"], [now_arg(now), "1", *limit_args(limit)]

    cases: list[tuple[str, str, tuple[list[str], list[str]]]] = [
        ("return 1", "return 1", ([], [])),
        ("return 1, given 1 key and 12 arguments", "return 1", hits(1)),
        ("definitions + return 1", definitions + "\nreturn 1", ([], ["", "0", "0"])),
        ("whole script, no hit", SOURCE, ([], ["", "0", "0"])),
        ("whole script, 1 hit", SOURCE, hits(1)),
        ("whole script, 1 hit, now given", SOURCE, hits(1, now=time.time() + 60)),
        ("whole script, 1 peek (cost 0)", SOURCE, hits(1, cost=0)),
        ("whole script, 2 hits", SOURCE, hits(2)),
        (f"whole script, {CALLERS} hits", SOURCE, hits(CALLERS)),
        ("single-hit script, 1 hit", SINGLE[limit.algorithm], single()),
        ("single-hit script, 1 hit, now given", SINGLE[limit.algorithm], single(time.time() + 60)),
    ]
    scripts = [(name, client.register_script(source), call) for name, source, call in cases]
    measured: dict[str, list[float]] = {name: [] for name, _, _ in scripts}
    for _, script, (keys, args) in scripts:
        script(keys, args)
    for _ in range(rounds):
        for name, script, (keys, args) in scripts:
            server.reset_stats()
            for _ in range(calls):
                script(keys, args)
            usec, runs = server_usec(server.commandstats())
            measured[name].append(usec / runs)
    print(
        f"\n== server time per script run (µs, INFO commandstats; median of {rounds} rounds of "
        f"{calls:,} runs)"
    )
    for name, values in measured.items():
        print(f"{name:42} {statistics.median(values):8.1f}")
    print(f"(ratekeeper's script: {len(SOURCE):,} characters, {SOURCE.count(chr(10)) + 1} lines)")
    client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.redis_store.profiling", description=__doc__
    )
    parser.add_argument("--calls", type=int, default=5_000, help="sequential calls")
    parser.add_argument("--per-caller", type=int, default=300, help="hits per asyncio caller")
    parser.add_argument("--top", type=int, default=20, help="functions shown per profile")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each timing")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        print(f"redis-server {server.version()} on 127.0.0.1:{server.port}")
        sequential(server, args.calls, args.top, args.rounds)
        concurrent(server, args.per_caller, args.top, args.rounds)
        one_per_turn(server, args.calls, args.rounds)
        server_side(server, args.calls // 2, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
