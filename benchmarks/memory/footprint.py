"""Bytes per idle key: what a store holds for a key after one hit, measured with tracemalloc.

The store and its limit are built first, and the keys are pre-built strings, so neither is
counted; what is counted is everything the library allocates to remember the keys: entries,
per-key state, the keys it derives from the caller's (prefixed strings, tuples), per-key locks,
and its share of the store's hash tables.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

from benchmarks.contenders import Contender

#: The limit every key is hit under: one hit exhausts it, so a second hit on a key the store
#: kept is denied, which is checked.
AMOUNT = 1


def bytes_per_key(make: Callable[[str, int], Contender], algorithm: str, keys: int) -> float:
    """Allocated bytes per key after one hit on each of ``keys`` distinct keys."""
    names = [f"user:{i}" for i in range(keys)]
    tracemalloc.start()
    try:
        contender = make(algorithm, AMOUNT)
        contender.hit("warm-up", 1)  # lazily built parts of the store are not per key
        contender.settle()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        contender.run(names)
        contender.settle()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        kept = not contender.hit(names[0], 1) and not contender.hit(names[-1], 1)
        if contender.decisions_per_key == 1 and not kept:
            raise RuntimeError(f"{contender.library} {algorithm}: the keys were not kept")
    finally:
        tracemalloc.stop()
    return (after - before) / keys
