"""How long a large rule file takes to validate:
``python -m benchmarks.engine.rules_load [MB ...]``.

Writes a rule file of each size given in megabytes (default 10 and 50) to a temporary
directory, loads it with ``load_rules`` in a fresh process (so that each measures its own peak
memory), and prints a markdown table of the wall time and the peak resident memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

#: Each block of the generated file: one tenant with the Envoy features a large file mixes.
BLOCK = """\
  - key: tenant
    value: tenant-{i}
    metadata: {{owner: team-{i}}}
    descriptors:
      - key: user
        rate_limit: {{unit: minute, requests_per_unit: {amount}, name: user-{i}}}
      - key: user
        value: robot-*
        share_threshold: true
        rate_limit: {{unit: second, requests_per_unit: 0}}
      - key: path
        value: /api/v{i}/*
        shadow_mode: true
        rate_limit:
          unit: hour
          requests_per_unit: 500
          replaces: [{{name: user-{i}}}]
      - key: plan
        value: internal
        rate_limit: {{unlimited: true}}
      - key: quota
        quota_mode: true
        rate_limit: {{period: 10s, requests_per_unit: 5, algorithm: gcra}}
"""
#: The rules in one block.
RULES_PER_BLOCK = 5


def rule_file(size: int) -> tuple[str, int]:
    """A valid rule file of at least ``size`` characters, and the number of blocks in it."""
    parts = ["# A generated rule file.\ndomain: big\ndescriptors:\n"]
    total, blocks = len(parts[0]), 0
    while total < size:
        block = BLOCK.format(i=blocks, amount=blocks % 1000 + 1)
        parts.append(block)
        total += len(block)
        blocks += 1
    return "".join(parts), blocks


_CHILD = """
import json, resource, sys, time
from ratekeeper.rules import load_rules
start = time.perf_counter()
rules = load_rules([sys.argv[1]])
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"rules": len(rules), "seconds": seconds, "peak": peak}))
"""


def measure(path: Path) -> dict[str, float]:
    """Load ``path`` in a fresh interpreter: its rule count, seconds and peak bytes."""
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, check=True
    )
    measured: dict[str, float] = json.loads(result.stdout)
    return measured


def main(argv: list[str]) -> None:
    sizes = [float(arg) for arg in argv] or [10.0, 50.0]
    print("| file | rules | load and validate | peak memory |")
    print("|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as directory:
        for megabytes in sizes:
            text, blocks = rule_file(int(megabytes * 1_000_000))
            path = Path(directory) / "rules.yaml"
            path.write_text(text)
            measured = measure(path)
            if measured["rules"] != blocks * RULES_PER_BLOCK:
                raise RuntimeError(f"loaded {measured['rules']} rules of {blocks * 5}")
            print(
                f"| {len(text) / 1e6:.1f} MB | {int(measured['rules']):,} "
                f"| {measured['seconds']:.1f} s | {measured['peak'] / 1e9:.2f} GB |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
