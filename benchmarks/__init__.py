"""ratekeeper's benchmarks: ``python -m benchmarks`` from the repository root.

One command measures, in one process and one run, ratekeeper's decisions per second against
the peer libraries ``limits``, ``pyrate-limiter`` and ``throttled-py`` for every algorithm they
share, ratekeeper alone for every algorithm, and the bytes each store holds per idle key. It
prints markdown; ``--output FILE`` also writes it, ``--quick`` makes a short smoke run. The peers
come with the ``bench`` extra: ``pip install -e '.[bench]'``.

These are numbers to read, never assertions: no test depends on a timing.
"""
