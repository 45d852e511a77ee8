"""The soak run: long mixed traffic through ``ratekeeper serve`` on Redis, measured each minute.

``python -m benchmarks.soak`` (or ``scripts/soak.sh``, which installs what it needs) starts a
redis-server of its own and ``ratekeeper serve --workers 2`` on free loopback ports, drives them
with wrk (``traffic.lua``: mostly a long tail of distinct users under their limit, a few hot keys
over theirs, three algorithms), and every minute records the decisions, p50/p99 latency, each
worker's RSS, Redis ``used_memory`` and key count. At the end it checks that every Redis key has
a TTL and writes ``report.md``, ``samples.json`` and ``soak.png`` (``report``). It exits 1 when a
key has no TTL or a worker's RSS grew more than ``MAX_GROWTH`` after the warm-up. It is not part
of the test suite: it runs for 30 minutes by default.
"""
