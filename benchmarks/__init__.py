"""ratekeeper's benchmarks: ``python -m benchmarks`` from the repository root.

One command measures, in one process and one run, ratekeeper's decisions per second against
the peer libraries ``limits``, ``pyrate-limiter`` and ``throttled-py`` for every algorithm they
share, ratekeeper alone for every algorithm, and the bytes each store holds per idle key. It
prints markdown; ``--output FILE`` also writes it, ``--quick`` makes a short smoke run. The peers
come with the ``bench`` extra: ``pip install -e '.[bench]'``.

``--redis`` runs the Redis benchmarks instead (``redis_store``: sequential and 64-concurrent
decisions/s, the deny path with the over-limit cache, memory per key), on a redis-server they
start on a free loopback port and stop by pid; ``--all`` runs both. ``--web`` measures what the
web integrations add to a request (``web``), against slowapi, Flask-Limiter and
django-ratelimit. ``python -m benchmarks.redis_store.profiling`` shows where a decision on
Redis spends its time.

One subpackage per area: ``memory``, ``redis_store``, ``engine``, ``service``, ``web`` and
``simulate``, each with a ``suite`` module the command runs. Shared by them: ``contenders``
(the libraries and the ``Contender`` every table times), ``trials`` (a measurement and its
checks) and ``report`` (the markdown).

These are numbers to read, never assertions: no test depends on a timing.
"""
