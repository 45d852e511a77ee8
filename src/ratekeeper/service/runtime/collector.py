"""How a ``ratekeeper serve`` process runs Python's cyclic garbage collector.

A decision allocates a few hundred container objects (the request's dictionaries and tuples,
coroutines, futures) that reference counting frees as soon as it is answered; almost none
of them ends in a cycle. With Python's default thresholds, the collector still runs its
youngest generation every 700 allocations and traverses the older ones every 7,000 and
70,000: on a busy service, several collections a millisecond, each walking objects that were
going to be freed anyway, and from time to time the whole heap built at startup (the rules,
the modules, protobuf's descriptors). On pyvoy the collection runs on the event loop's
thread, holding the GIL while Envoy's threads wait to hand over the next requests.

``tune()``, called once the app is built in each process that serves (``serve`` with one
worker, each worker's ``app.from_environment``, pyvoy's ``pyvoy_app``), moves everything
alive at that moment out of the collector's reach (``gc.freeze``) and raises the thresholds
to ``THRESHOLDS``. Cycles are still collected, every ``THRESHOLDS[0]`` allocations instead of
700. Measured through a real Envoy on Redis (docs/benchmarks/service.md, "Envoy's door per
core"): a decision costs about 15% less CPU over HTTP and about 35% less over gRPC on pyvoy.
A library user's own process is left as it is: ``create_app`` does not call it.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("ratekeeper.service")

#: The collector's thresholds once tuned: its youngest generation collected after so many
#: allocations (Python's default is 700), the next after so many of those (10), the oldest
#: after so many of those (10).
THRESHOLDS = (50_000, 20, 100)


def tune() -> None:
    """Collect once, freeze what is left (the app and everything it holds), and raise the
    collector's thresholds to ``THRESHOLDS``; logged at debug level."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    log.debug(
        "garbage collector: %s objects frozen; thresholds %s",
        f"{gc.get_freeze_count():,}",
        ", ".join(f"{one:,}" for one in THRESHOLDS),
    )
