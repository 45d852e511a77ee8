"""``simulate``: replay a trace through limits and measure each against the exact reference."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ratekeeper.core.errors import InvalidLimitError, TraceError
from ratekeeper.core.inputs import decimal
from ratekeeper.core.limits import Limit
from ratekeeper.core.rates import parse
from ratekeeper.simulate.bins import Zoom
from ratekeeper.simulate.leases import LeaseOptions, Leases, runs
from ratekeeper.simulate.measures import Measures, dense, measure
from ratekeeper.simulate.replay import Replay, replay
from ratekeeper.simulate.trace import Event, Trace

#: A limit as ``simulate`` takes it: a ``Limit``, or ``"algorithm:rate"`` (see ``parse_limit``).
LimitLike = Limit | str

#: Bytes 0 and 1 as the characters ``0`` and ``1``.
_DIGITS = bytes.maketrans(b"\x00\x01", b"01")

_FLAGS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def parse_limit(text: str) -> Limit:
    """A limit from ``"algorithm:rate[:name=value,...]"``, e.g. ``"gcra:100/minute"`` or
    ``"token_bucket:100/minute:burst=20"``; a bare rate is a fixed window. ``calendar`` and
    ``partial`` take ``true`` or ``false`` (or ``1``, ``0``, ``yes``, ``no``). Raises
    ``InvalidLimitError``."""
    if not isinstance(text, str):
        raise InvalidLimitError(
            f"a limit must be a Limit or a string such as 'gcra:100/minute', not {text!r}"
        )
    algorithm, _, rest = text.partition(":") if ":" in text else ("fixed_window", "", text)
    rate, _, extra = rest.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, extra.split(",")):
        name, equals, value = item.partition("=")
        if not equals:
            raise InvalidLimitError(f"expected name=value in {text!r}, not {item!r}")
        if name in ("burst",):
            params[name] = int(value) if decimal(value) else value
        elif name == "granularity":
            try:
                params[name] = float(value)
            except ValueError:
                raise InvalidLimitError(f"granularity must be seconds in {text!r}") from None
        elif name in ("calendar", "partial"):
            flag = _FLAGS.get(value.lower())
            if flag is None:
                raise InvalidLimitError(f"{name} must be true or false in {text!r}, not {value!r}")
            params[name] = flag
        else:
            raise InvalidLimitError(f"unknown limit parameter {name!r} in {text!r}")
    return parse(rate, algorithm, **params)


@dataclass(frozen=True)
class Simulation:
    """The outcome of ``simulate``: what the trace held, and ``measures`` per limit.

    ``offered`` is the units requested per ``width`` seconds (retries not included), as
    ``(seconds from the first event, units)``; each ``Measures.series`` is the units admitted,
    alike. ``replay`` holds the raw tallies (and, with ``record``, every decision).
    ``leases`` holds the leased runs, when ``simulate`` was given ``leases``. ``marks`` are
    the moments of the attack the trace's generator made (``Trace.marks``), as ``(start, end)``
    in seconds from the first event. ``zoom`` is the close-up of a short attack (see
    ``ratekeeper.simulate.bins.zoom``), in seconds from the first event, whose bins each
    ``Measures.zoom`` holds; ``None`` without one.
    """

    name: str
    events: int
    units: int
    keys: int
    duration: float
    width: float
    offered: list[tuple[float, int]]
    measures: list[Measures]
    replay: Replay = field(repr=False)
    leases: Leases | None = None
    marks: list[tuple[float, float]] = field(default_factory=list)
    zoom: Zoom | None = None

    def to_dict(self, per_event: bool = False) -> dict[str, Any]:
        """The numbers, as JSON-ready data: what the trace held and each limit's measures.

        With ``per_event``, also the time series (``offered``, and each limit's ``series`` and
        ``fullest``, per ``width`` seconds; with a close-up, ``zoom``, its bounds and width,
        and each limit's ``zoom``) and, for a simulation run with ``record``, each
        limit's ``decisions``, one character per event of the trace in its order (``1``
        allowed, ``0`` refused), and ``event_delays``, the seconds each waited (only for a
        limit whose hits waited)."""
        data: dict[str, Any] = {
            "trace": {
                "name": self.name,
                "events": self.events,
                "units": self.units,
                "keys": self.keys,
                "duration": self.duration,
                "marks": [list(mark) for mark in self.marks],
            },
            "width": self.width,
            "limits": [measures.to_dict(series=per_event) for measures in self.measures],
            **({"leases": self.leases.to_dict()} if self.leases is not None else {}),
        }
        if per_event:
            data["offered"] = [list(point) for point in self.offered]
            if self.zoom is not None:
                data["zoom"] = asdict(self.zoom)
            for limit, tally in zip(data["limits"], self.replay.tallies, strict=True):
                if tally.decisions is not None:
                    limit["decisions"] = tally.decisions.translate(_DIGITS).decode("ascii")
                if tally.delay_of is not None and tally.delays:
                    limit["event_delays"] = list(tally.delay_of)
        return data


def simulate(
    source: Trace | Iterable[Event],
    limits: Sequence[LimitLike],
    *,
    width: float | None = None,
    record: bool = False,
    progress: Callable[[int], None] | None = None,
    instances: int = 1,
    leases: LeaseOptions | None = None,
) -> Simulation:
    """Replay ``source`` through each of ``limits`` on a virtual clock; measure each.

    ``source`` is a ``Trace`` (see ``ratekeeper.simulate.generators``) or any
    iterable of ``(time, key, cost)`` events in time order (see ``ratekeeper.simulate.loaders``),
    which is read a chunk at a time. ``limits`` are ``Limit`` objects or strings for
    ``parse_limit``. Every limit decides with the same ``step`` its stores use, and is judged
    against the exact reference. Example::

        from ratekeeper.simulate import generators, simulate
        result = simulate(generators.window_edge(100, 60), ["fixed_window:100/minute"])
        result.measures[0].peak  # 200

    With ``leases``, each limit is also replayed leased (``sync="leased"``) through
    ``instances`` simulated processes sharing one store, and exact on one store, on the trace's
    time (see ``ratekeeper.simulate.leases``); ``Simulation.leases`` compares the two::

        result = simulate(trace, ["fixed_window:1000/second"], instances=4,
                          leases=LeaseOptions(horizon=0.05, ttl=1.0, share=0.1))
        result.leases.measures[0].ratio  # leased admitted / exact admitted

    Raises ``InvalidLimitError`` for a limit that cannot lease, and ``TraceError`` for bad
    ``instances`` or options, ``instances`` without ``leases``, or a trace with retries.
    """
    if isinstance(limits, str):
        raise InvalidLimitError(f"limits must be a list of limits, not the string {limits!r}")
    if not limits:
        raise InvalidLimitError("simulate needs at least one limit")
    parsed = [limit if isinstance(limit, Limit) else parse_limit(limit) for limit in limits]
    leased = []
    if leases is not None:
        if isinstance(source, Trace) and source.retry is not None:
            raise TraceError("a leased run does not replay retries: simulate it without retry")
        leased = runs(parsed, instances, leases)
    elif instances != 1:
        raise TraceError("instances are simulated with leases: pass leases=LeaseOptions()")
    replayed = replay(
        source,
        parsed,
        width=width,
        record=record,
        progress=progress,
        feed=[run.feed for run in leased],
    )
    start = replayed.first
    return Simulation(
        name=replayed.name,
        events=replayed.events,
        units=replayed.units,
        keys=len(replayed.tallies[0].keys),
        duration=max(replayed.last - start, 0.0) if replayed.events else 0.0,
        width=replayed.width,
        offered=dense(replayed.offered, replayed.span(), replayed.width, start),
        measures=measure(replayed),
        replay=replayed,
        leases=None
        if leases is None
        else Leases(instances, leases, [run.measures(start) for run in leased]),
        marks=[(begin - start, end - start) for begin, end in replayed.marks],
        zoom=None
        if replayed.zoom is None
        else Zoom(replayed.zoom.start - start, replayed.zoom.end - start, replayed.zoom.width),
    )
