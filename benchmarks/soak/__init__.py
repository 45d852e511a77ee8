"""The soak run: long mixed traffic through ``ratekeeper serve`` on Redis, measured each minute.

``python -m benchmarks.soak`` (or ``scripts/soak.sh``, which installs what it needs) starts a
redis-server of its own and ``ratekeeper serve --workers 2`` on free loopback ports, drives them
with wrk (``traffic.lua``: mostly a long tail of distinct users under their limit, a few hot keys
over theirs, three algorithms), and every minute records the decisions, p50/p99 latency, each
worker's RSS, Redis ``used_memory`` and key count. At the end it checks that every Redis key has
a TTL and writes ``report.md``, ``samples.json`` and ``soak.png`` (``report``). It exits 1 when a
key has no TTL or a worker's RSS grew more than ``MAX_GROWTH`` after the warm-up. It is not part
of the test suite: it runs for 30 minutes by default.

Traffic is HTTP JSON only (``POST /v1/check``): the gRPC path shares the engine and its cache,
which is what a soak looks for. wrk is a closed loop: ``--rate`` sets a pause per connection
(``load.delay_ms``), so the rate is a target the service may not reach. Redis's key count
saw-tooths with the minute windows of the ``user`` rule, which all end at once.
"""
