"""Simulate limits on a virtual clock: replay a trace through any algorithms and measure how
far each is from exact.

``simulate`` replays ``(time, key, cost)`` events through each limit's own ``step`` (the one
the stores use), with no clock and no sleeping, and judges every decision against the exact
reference, a sliding log of the same amount and period. Traces come from ``generators``
(Poisson, bursts, the window-edge attack, a diurnal ramp, Zipf keys, retry storms) or files
(``loaders``: CSV, JSON lines, nginx access logs). ``report`` prints and saves the numbers;
``plots`` draws them (needs ``ratekeeper[plot]``). With ``leases=LeaseOptions(...)`` each
limit is also replayed leased through several simulated instances sharing one store
(``leases``), to choose a slice size from a trace of one's own traffic. Example::

    from ratekeeper.simulate import generators, simulate

    result = simulate(generators.window_edge(100, 60), ["fixed_window:100/minute",
                                                        "sliding_log:100/minute"])
    [m.peak for m in result.measures]  # [200, 100]
"""

from __future__ import annotations

from ratekeeper.simulate.bins import Zoom
from ratekeeper.simulate.leases import LeaseMeasures, LeaseOptions, Leases
from ratekeeper.simulate.measures import Delays, Measures
from ratekeeper.simulate.simulation import LimitLike, Simulation, parse_limit, simulate
from ratekeeper.simulate.trace import Event, Retry, Trace

__all__ = [
    "Delays",
    "Event",
    "LeaseMeasures",
    "LeaseOptions",
    "Leases",
    "LimitLike",
    "Measures",
    "Retry",
    "Simulation",
    "Trace",
    "Zoom",
    "parse_limit",
    "simulate",
]
