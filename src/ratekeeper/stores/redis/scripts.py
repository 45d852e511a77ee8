"""The Lua scripts the Redis stores run, and their arguments and replies.

The scripts are assembled from this package's entry scripts (``prelude.lua``,
``dispatch.lua``, ``single.lua``, ``refund.lua``, ``release.lua``) and the ``.lua`` twin beside
each algorithm's Python module:

- ``SOURCE``, the batch script (``apply_many``): the prelude, every twin and ``dispatch.lua``;
  it applies a batch of hits in one round trip, its layout documented in ``dispatch.lua``;
- ``SINGLE[algorithm]``, one single-hit script per algorithm (``apply``): the prelude, that
  algorithm's twin and ``single.lua``; twelve arguments, no dispatch;
- ``REFUND``, the refund script: the batch script's parts with ``refund.lua``, and the twins'
  ``refund`` steps; it takes back what one slot of a Redis Cluster batch admitted;
- ``RELEASE``, the release script (``release``): the prelude, the concurrency twin and
  ``release.lua``;
- ``LEASE[algorithm]``, the lease script of each algorithm whose limits can lease (``lease``):
  the prelude, that algorithm's twin with its refund and hold, and ``leases.lua``;
- ``LIBRARY``, the same single-hit and batch entries as a Redis 7 function library
  (``FUNCTION LOAD``, ``FCALL``), whose definitions run once, not on every call (``_library``).

All run the same twins, so one parity suite binds them to the Python ``step`` and ``refund``.
The single-hit and batch scripts reply one string, each decision packed as ``DECISION``
(the prelude's format of the same name); the release script replies the seven fields of its
decision as a flat array.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Callable, Sequence
from functools import lru_cache
from importlib.resources import files
from typing import Any

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.decisions import Decision
from ratekeeper.core.inputs import check_now
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import spec
from ratekeeper.stores.contract import Lease

#: NEEDS from the algorithms of ARGV's limit blocks (10 fields each), in the batch layout.
_NEEDS_FROM_ARGV = (
    "local NEEDS = {}\nfor j = 1, tonumber(ARGV[3]) do NEEDS[ARGV[3 + (j - 1) * 10 + 1]] = true end"
)
#: The batch script's header: the algorithms its ARGV names, no refund steps.
BATCH_HEADER = _NEEDS_FROM_ARGV + "\nlocal REFUNDS, HOLDS = false, false"
#: The refund script's header: the same, with the refund steps.
REFUND_HEADER = _NEEDS_FROM_ARGV + "\nlocal REFUNDS, HOLDS = true, false"
#: A decision in a script's reply: ``Decision``'s eight fields in its order, little-endian
#: (allowed a byte, limit and remaining 8-byte integers, the three floats doubles, granted an
#: 8-byte integer, degraded a byte, always 0): the prelude's ``DECISION``.
DECISION = struct.Struct("<?qqdddq?")
_NOW = struct.Struct("<d")

_new = tuple.__new__
_unpack = DECISION.unpack
_iter_unpack = DECISION.iter_unpack


#: Where this package's entry scripts are, as a path inside the ``ratekeeper`` package.
HERE = "stores/redis/"


#: An entry script's line ``--@steps: ...`` or ``--@refunds: ...`` is written out from the
#: registry (``expand``): one line per algorithm, so that no script names an algorithm by hand.
_MARKER = re.compile(r"^(?P<indent>[ ]*)--@(?P<part>steps|refunds):.*$", re.MULTILINE)


def _generated(part: str, indent: str) -> str:
    names = [algorithm.value for algorithm in Algorithm]
    if part == "steps":  # dispatch.lua: the step of the hit's algorithm, by its name
        lines = [f"if name == '{name}' then step = {name}" for name in names[:1]]
        lines += [f"elseif name == '{name}' then step = {name}" for name in names[1:]]
    else:  # refund.lua: each algorithm's refund, by its name
        lines = [f"{name} = {name}_refund," for name in names]
    return "\n".join(indent + line for line in lines)


def expand(source: str) -> str:
    """``source`` with its ``--@steps`` and ``--@refunds`` lines written out from the
    registry of algorithms (``ratekeeper.core.registry``)."""
    return _MARKER.sub(lambda match: _generated(match["part"], match["indent"]), source)


def _read(name: str) -> str:
    return expand(files("ratekeeper").joinpath(name).read_text())


def batch_source(
    read: Callable[[str], str] = _read,
    header: str = BATCH_HEADER,
    entry: str = HERE + "dispatch.lua",
) -> str:
    """The batch script (or, with ``REFUND_HEADER`` and ``refund.lua``, the refund
    script), its parts read by ``read(path inside the package)``."""
    parts = [header, read(HERE + "prelude.lua")]
    parts += [read(f"algorithms/{algorithm.value}.lua") for algorithm in Algorithm]
    parts.append(expand(read(entry)))
    return "\n".join(parts)


def _single_source(algorithm: Algorithm, entry: str = HERE + "single.lua") -> str:
    name = algorithm.value
    return "\n".join(
        [
            f"local NEEDS = {{{name} = true}}\nlocal REFUNDS, HOLDS = false, false",
            _read(HERE + "prelude.lua"),
            _read(f"algorithms/{name}.lua"),
            f"local STEP = {name}",
            _read(entry),
        ]
    )


def _lease_source(algorithm: Algorithm) -> str:
    """The lease script of ``algorithm`` (``leases.lua``): its step, refund and hold."""
    name = algorithm.value
    hold = f"{name}_hold" if spec(algorithm).hold is not None else "nil"
    return "\n".join(
        [
            f"local NEEDS = {{{name} = true}}\nlocal REFUNDS, HOLDS = true, true",
            _read(HERE + "prelude.lua"),
            _read(f"algorithms/{name}.lua"),
            f"local STEP, REFUND, HOLD = {name}, {name}_refund, {hold}",
            _read(HERE + "leases.lua"),
        ]
    )


def _library() -> tuple[str, dict[str, str]]:
    """The function library for Redis 7 (``FUNCTION LOAD``), and the name of its function for
    each algorithm's single-hit entry and for the batch entry (under ``"batch"``).

    The same parts as the scripts, run the same way: every entry sees ``KEYS`` and ``ARGV``
    laid out as for its script. Redis runs a library's body once, when it is loaded, where
    only ``redis.register_function`` may be called (not even ``tonumber`` is there), so the
    prelude and every twin are put in ``define()``, run on the library's first call: its
    closures are then made once, where a script makes them on every call. The library and
    its functions are named for a digest of the source, so that two versions of ratekeeper
    sharing a server each call their own.
    """
    names = [algorithm.value for algorithm in Algorithm]
    single = _read(HERE + "single.lua")
    body = "\n".join(
        [
            "local KEYS, ARGV",
            "local function define()",
            "local NEEDS = {" + ", ".join(f"{name} = true" for name in names) + "}",
            "local REFUNDS, HOLDS = false, false",
            _read(HERE + "prelude.lua"),
            *(_read(f"algorithms/{name}.lua") for name in names),
            "local entries = {}",
            *(f"entries.{name} = function()\nlocal STEP = {name}\n{single}\nend" for name in names),
            f"entries.batch = function()\n{_read(HERE + 'dispatch.lua')}\nend",
            "return entries",
            "end",
            "local entries",
            *(
                f"redis.register_function('@{entry}', function(keys, args)\n"
                f"  KEYS, ARGV = keys, args\n"
                f"  entries = entries or define()\n"
                f"  return entries.{entry}()\n"
                "end)"
                for entry in [*names, "batch"]
            ),
        ]
    )
    digest = hashlib.sha1(body.encode()).hexdigest()[:16]
    functions = {entry: f"rk_{digest}_{entry}" for entry in [*names, "batch"]}
    source = f"#!lua name=ratekeeper_{digest}\n" + body.replace("'@", f"'rk_{digest}_")
    return source, functions


SOURCE = batch_source()
SINGLE = {algorithm: _single_source(algorithm) for algorithm in Algorithm}
REFUND = batch_source(header=REFUND_HEADER, entry=HERE + "refund.lua")
RELEASE = _single_source(Algorithm.CONCURRENCY, HERE + "release.lua")
#: ``LEASE[algorithm]``, the lease script of each algorithm whose limits can lease.
LEASE = {
    algorithm: _lease_source(algorithm) for algorithm in Algorithm if not spec(algorithm).no_lease
}
#: The function library (``FUNCTION LOAD``) and its functions' names: ``FUNCTIONS[algorithm]``
#: is the single-hit entry of that algorithm (as ``SINGLE``), ``FUNCTIONS["batch"]`` the
#: batch entry (as ``SOURCE``).
LIBRARY, FUNCTIONS = _library()


@lru_cache(maxsize=4096)
def limit_args(limit: Limit) -> tuple[str, ...]:
    """A limit's ten fields, as the scripts read them; built once per limit."""
    return (
        limit.algorithm.value,
        str(limit.amount),
        repr(limit.period),
        str(limit.capacity),
        repr(limit.rate),
        repr(limit.interval),
        repr(limit.bucket),
        limit.unit,
        "1" if limit.partial else "0",
        "1" if limit.debt else "0",
    )


def now_arg(now: float | None) -> str:
    """ARGV[1] of either script: ``now`` exactly, or '' for the server's ``TIME``."""
    return "" if now is None else repr(check_now(now))


def arguments(
    hits: Sequence[tuple[Limit, int]],
    now: float | None,
    all_or_nothing: bool,
    *,
    with_now: bool = False,
) -> list[str]:
    """The batch script's ARGV for ``(limit, cost)`` hits: each distinct limit's fields once,
    then a limit index and a cost per hit (layout in ``dispatch.lua``). ``with_now`` asks the
    reply to end with the script's ``now`` (``decisions_at``). The refund script takes the
    same layout."""
    index: dict[Limit, str] = {}
    blocks: list[str] = []
    tail: list[str] = []
    for limit, cost in hits:
        number = index.get(limit)
        if number is None:
            number = index[limit] = str(len(index) + 1)
            blocks.extend(limit_args(limit))
        tail.append(number)
        tail.append(str(cost))
    modes = ("2", "1") if all_or_nothing else ("3", "0")
    mode = modes[0] if with_now else modes[1]
    return [now_arg(now), mode, str(len(index)), *blocks, *tail]


def decision(reply: bytes) -> Decision:
    """Decode a single-hit script's reply, one packed ``DECISION``."""
    return _new(Decision, _unpack(reply))


def decisions(reply: bytes) -> list[Decision]:
    """Decode a batch script's reply, one packed ``DECISION`` per hit."""
    return [_new(Decision, fields) for fields in _iter_unpack(reply)]


def decisions_at(reply: bytes) -> tuple[list[Decision], float]:
    """Decode a batch script's reply that ends with its ``now`` (``with_now``): the decisions,
    and the time they were taken at."""
    end = len(reply) - _NOW.size
    return decisions(reply[:end]), _NOW.unpack_from(reply, end)[0]


def lease_args(ask: Lease) -> list[str]:
    """The lease script's ARGV for a checked exchange (layout in ``leases.lua``)."""
    return [
        now_arg(ask.now),
        str(ask.want),
        ask.holder,
        repr(float(ask.ttl)),
        str(ask.returned),
        "" if ask.taken_at is None else repr(float(ask.taken_at)),
        str(ask.need),
        *limit_args(ask.limit),
    ]


def taken(reply: bytes) -> tuple[Decision, float]:
    """Decode the lease script's reply: the packed decision, then its ``now``."""
    return decisions_at(reply)[0][0], _NOW.unpack_from(reply, DECISION.size)[0]


def released(reply: Sequence[Any]) -> Decision:
    """Decode the release script's reply: ``allowed, limit, remaining, reset_after,
    retry_after, delay, granted`` (integers come back as ``int``; the floats as ``int`` or as
    ``%.17g`` bytes)."""
    allowed, limit, remaining, reset_after, retry_after, delay, granted = reply
    return _new(
        Decision,
        (
            allowed == 1,
            limit,
            remaining,
            float(reset_after),
            float(retry_after),
            float(delay),
            granted,
            False,
        ),
    )
