"""How a ``ratekeeper serve`` process runs Python's cyclic garbage collector.

A decision allocates a few hundred container objects (the request's dictionaries and tuples,
coroutines, futures), which reference counting frees once it is answered. With Python's
default thresholds the collector runs its youngest generation every 700 allocations not yet
freed: on a busy service, every few requests, each time walking the objects of all the
requests in flight, and from time to time the whole heap built at startup (the rules, the
modules, protobuf's descriptors). On pyvoy it runs on the event loop's thread, holding the
GIL while Envoy's threads wait to hand over the next requests.

``tune(server)``, called once the app is built in each process that serves (``serve`` with
one worker, each worker's ``app.from_environment``, pyvoy's ``pyvoy_app``), moves everything
alive at that moment out of the collector's reach (``gc.freeze``) and raises the youngest
generation's threshold to ``YOUNGEST[server]``. Cycles are still collected. What decides the
threshold is the garbage that only the collector frees: on uvicorn with grpc.aio, grpc.aio
leaves about seven objects in a reference cycle a call (the closure of its
``_find_method_handler`` and the call's details and metadata), which a collection frees in
one pause proportional to the threshold: at 50,000, about 70 ms every two seconds under load
(a p99 through Envoy of 64 to 70 ms against 18 to 22). At 10,000 the pauses stay near a gRPC
call's own p99 while HTTP keeps most of the gain. On pyvoy nothing in a decision's path
is left in a cycle: at 50,000, under load, the collector did not run at all. Measured through
a real Envoy on Redis: docs/benchmarks/service.md, "Envoy's door per core".

A library user's own process is left as it is: ``create_app`` and ``build_app`` do not call
it.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("ratekeeper.service")

#: The youngest generation's threshold once tuned, by ``--server`` (Python's default: 700);
#: the older generations keep Python's 10 and 10.
YOUNGEST = {"uvicorn": 10_000, "pyvoy": 50_000}


def tune(server: str) -> None:
    """Collect once, freeze what is left (the app and everything it holds), and raise the
    youngest generation's threshold to ``YOUNGEST[server]``; logged at debug level."""
    youngest = YOUNGEST[server]
    gc.collect()
    gc.freeze()
    gc.set_threshold(youngest, 10, 10)
    log.debug(
        "garbage collector: %s objects frozen; the youngest generation collected every %s "
        "allocations",
        f"{gc.get_freeze_count():,}",
        f"{youngest:,}",
    )
