"""Moved to ``ratekeeper.simulate.generators``; this path warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.simulate.generators import (
    MAX_EVENTS,
    START,
    bursts,
    diurnal,
    poisson,
    retry_storm,
    window_edge,
    zipf,
)

__all__ = [
    "MAX_EVENTS",
    "START",
    "bursts",
    "diurnal",
    "poisson",
    "retry_storm",
    "window_edge",
    "zipf",
]

moved(__name__, "ratekeeper.simulate.generators")
