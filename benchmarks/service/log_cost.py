"""What the decision log costs a decision: ``python -m benchmarks.service.log_cost``.

The engine ``ratekeeper serve`` builds (``build_parts``: the metrics and every other observer the
settings ask for), on the memory store, decides one descriptor matched by a rule
(``await engine.check("api", [[("user", key)]])`` in a loop), under three settings that take
turns, repeat by repeat, each keeping its best (nanoseconds per decision):

- ``--log-level info``: the decision log off, as the service runs by default;
- ``--log-level debug``: one line per descriptor decided (written to ``/dev/null``);
- ``--log-level debug --log-keys``: the same lines with the key.

The ratio is each row's time over the ``info`` row's. ``--quick`` for a smoke run. Needs the
``server`` extra. Nothing here is a timed assertion; no test depends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.trials import timed
from ratekeeper.engine import AsyncEngine
from ratekeeper.service.observe.logs import configure_logging
from ratekeeper.service.runtime.app import build_parts
from ratekeeper.service.runtime.settings import Settings

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000000000, name: per_user}
"""

#: The rows: their name, and the settings they change.
ROWS: tuple[tuple[str, dict[str, object]], ...] = (
    ("--log-level info", {"log_level": "info"}),
    ("--log-level debug", {"log_level": "debug"}),
    ("--log-level debug --log-keys", {"log_level": "debug", "log_keys": True}),
)


def configure(settings: Settings) -> None:
    """The log as ``serve`` configures it for ``settings``, written to ``/dev/null``."""
    stderr = sys.stderr
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the handler keeps it for the run
    try:
        configure_logging(settings.log_format, settings.log_level)
    finally:
        sys.stderr = stderr


def engine(settings: Settings) -> AsyncEngine:
    """The engine of the service ``settings`` describe, built under its own log."""
    configure(settings)
    return build_parts(settings, grpc_aio=False).engine


def decisions(
    loop: asyncio.AbstractEventLoop,
    rows: Sequence[tuple[Settings, AsyncEngine]],
    calls: int,
    repeat: int,
) -> list[float]:
    """Each engine's best time per decision, in nanoseconds, taking turns, each under its
    own log."""
    sent = [[[("user", f"user:{index % 100}")]] for index in range(calls)]

    async def run(checked: AsyncEngine) -> None:
        check = checked.check
        for descriptors in sent:
            await check("api", descriptors)

    best = [float("inf")] * len(rows)
    for round_ in range(repeat + 1):  # the first round caches every key's plan
        for index, (settings, checked) in enumerate(rows):
            configure(settings)
            seconds = timed(lambda: loop.run_until_complete(run(checked)))  # noqa: B023
            if round_:
                best[index] = min(best[index], seconds / calls * 1e9)
    return best


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50_000, help="decisions per repeat")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args(argv)
    calls, repeat = (5_000, 3) if args.quick else (args.calls, args.repeat)
    fields = {field.name for field in dataclasses.fields(Settings)}
    rows = [(name, changes) for name, changes in ROWS if set(changes) <= fields]
    with tempfile.TemporaryDirectory() as directory:
        rules = Path(directory) / "rules.yaml"
        rules.write_text(RULES)
        base = Settings(rules=(str(rules),), config="sqlite://:memory:")
        loop = asyncio.new_event_loop()
        try:
            built = [
                (settings, engine(settings))
                for settings in (dataclasses.replace(base, **changes) for _, changes in rows)
            ]
            best = decisions(loop, built, calls, repeat)
            for _, checked in built:
                loop.run_until_complete(checked.close())
        finally:
            loop.close()
            configure_logging("text", "info")
    print("| settings | ns per decision | ratio to info |")
    print("|---|---:|---:|")
    for (name, _), cost in zip(rows, best, strict=True):
        print(f"| {name} | {cost:,.0f} | {cost / best[0]:.3f} |")


if __name__ == "__main__":
    main()
