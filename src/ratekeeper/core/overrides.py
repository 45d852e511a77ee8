"""A per-key limit override, as the configuration store holds it.

The source design's per-key configuration, ``{"user:241531": {"time_window_sec": 1,
"capacity": 5}}``, extended with ``algorithm``, ``granularity``, ``burst`` and ``sync``. An
override wins over the limit a rule file gives the same key.

An override that names no algorithm is a fixed window, as a ``Limit`` and a rule are, or a
bucketed window when it gives a ``granularity`` (the only algorithm that takes one). Every
override ratekeeper stores names its algorithm (``to_dict``), so what a store holds reads back
as it was written whatever this default.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ratekeeper.core.errors import ConfigError, InvalidLimitError
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import Algorithm

#: The algorithm of an override that names none: the fixed window, as for a ``Limit`` and a
#: rule (a bucketed window when the override gives a ``granularity``).
DEFAULT_ALGORITHM = Algorithm.FIXED_WINDOW

FIELDS = ("capacity", "time_window_sec", "algorithm", "granularity", "burst", "sync")


def _algorithm(algorithm: Algorithm | str | None, granularity: float | None) -> Algorithm | str:
    """The algorithm given, else the default: a bucketed window for a ``granularity``, else
    ``DEFAULT_ALGORITHM``."""
    if algorithm is not None:
        return algorithm
    return DEFAULT_ALGORITHM if granularity is None else Algorithm.BUCKETED_WINDOW


def _check(name: str, value: object, kind: str) -> None:
    """Name the override's own field when a value is out of range (Limit names its own)."""
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidLimitError(f"{name} must be a positive integer, not {value!r}")
    elif not isinstance(value, str) and (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value < math.inf  # JSON has no infinity: the stores could not keep it
    ):
        raise InvalidLimitError(
            f"{name} must be positive seconds or a period such as '5m', not {value!r}"
        )


class Override:
    """``capacity`` hits per ``time_window_sec`` seconds for one key, by ``algorithm``
    (default: a fixed window, or a bucketed window when ``granularity`` is given).

    ``limit`` is the equivalent ``Limit``. Build one from a mapping with ``from_dict``, which
    rejects unknown fields and bad values with a ``ConfigError`` that names them. Example::

        Override.from_dict({"time_window_sec": 1, "capacity": 5})
    """

    __slots__ = ("granularity", "limit")

    limit: Limit
    granularity: float | None

    def __init__(
        self,
        capacity: int,
        time_window_sec: float | str,
        algorithm: Algorithm | str | None = None,
        *,
        granularity: float | None = None,
        burst: int | None = None,
        sync: str = "exact",
    ) -> None:
        _check("capacity", capacity, "count")
        _check("time_window_sec", time_window_sec, "seconds")
        if burst is not None:
            _check("burst", burst, "count")
        limit = Limit(
            capacity,
            time_window_sec,
            _algorithm(algorithm, granularity),
            granularity=granularity,
            burst=burst,
            sync=sync,
        )
        object.__setattr__(self, "limit", limit)
        # Kept as given: a default granularity follows the window if the window changes.
        object.__setattr__(self, "granularity", granularity)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "override") -> Override:
        """Validate ``data`` (the JSON form) and build the override; ``where`` prefixes errors."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: must be a map of {', '.join(FIELDS)}")
        unknown = sorted(map(str, set(data) - set(FIELDS)))
        if unknown:
            names = ", ".join(repr(name) for name in unknown)
            raise ConfigError(
                f"{where}: unknown field{'s' if len(unknown) > 1 else ''} {names}; "
                f"expected some of: {', '.join(FIELDS)}"
            )
        missing = [name for name in ("capacity", "time_window_sec") if name not in data]
        if missing:
            raise ConfigError(f"{where}: missing {' and '.join(missing)}")
        try:
            return cls(
                data["capacity"],
                data["time_window_sec"],
                data.get("algorithm"),
                granularity=data.get("granularity"),
                burst=data.get("burst"),
                sync=data.get("sync", "exact"),
            )
        except InvalidLimitError as error:
            raise ConfigError(f"{where}: {error}") from None

    @classmethod
    def from_json(cls, text: str, where: str = "override") -> Override:
        """``from_dict`` of a JSON object."""
        try:
            data = json.loads(text)
        except ValueError as error:
            raise ConfigError(f"{where}: not valid JSON: {error}") from None
        return cls.from_dict(data, where)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: capacity, time_window_sec and algorithm, plus the fields given."""
        limit = self.limit
        data: dict[str, Any] = {
            "capacity": limit.amount,
            "time_window_sec": int(limit.period) if limit.period.is_integer() else limit.period,
            "algorithm": limit.algorithm.value,
        }
        if self.granularity is not None:
            data["granularity"] = limit.granularity
        if limit.burst is not None:
            data["burst"] = limit.burst
        if limit.sync != "exact":
            data["sync"] = limit.sync
        return data

    def to_json(self) -> str:
        """``to_dict`` as compact JSON with sorted keys."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Override is immutable; cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Override)
            and other.limit == self.limit
            and other.granularity == self.granularity
        )

    def __hash__(self) -> int:
        return hash(self.limit)

    def __repr__(self) -> str:
        return f"Override.from_dict({self.to_dict()!r})"
