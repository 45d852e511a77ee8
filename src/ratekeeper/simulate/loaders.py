"""Trace files: CSV, JSON lines and nginx access logs, read lazily as events.

Each reader returns a ``Loaded``: an iterable of ``(time, key, cost)`` events that reads its
file one line at a time as it is iterated, so a file of any size streams in constant memory.
A line that cannot be read is never dropped silently: it is counted in ``Loaded.bad_lines``,
the first ``KEEP_BAD`` are kept in ``Loaded.bad`` with their line numbers, and with
``strict=True`` the first one raises ``TraceError`` naming its line.

Formats:

- CSV: ``time,key[,cost]`` per line, with an optional header naming the columns (``time``,
  ``key``, ``cost``, in any order; other columns are ignored).
- JSON lines: ``{"time": ..., "key": ..., "cost": ...}`` or ``[time, key, cost]`` per line.
- nginx's default ``combined`` log format (``$remote_addr - $remote_user [$time_local]
  "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"``), keyed by one of
  its fields (default ``remote_addr``, the client address), or ``method`` or ``path`` of the
  request. Every request costs 1.

A time is seconds since the epoch or an ISO 8601 date and time (UTC unless it says otherwise);
a cost is a whole number from 0 (default 1).
"""

from __future__ import annotations

import csv
import io
import json
import re
from calendar import timegm
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from math import isfinite
from pathlib import Path
from typing import IO, Any

from ratekeeper.core.errors import TraceError
from ratekeeper.core.inputs import check_cost, check_key
from ratekeeper.simulate.trace import Event

#: How many bad lines a ``Loaded`` keeps, with their numbers and reasons (all are counted).
KEEP_BAD = 20

#: The formats, by name, and the file suffixes that select them.
FORMATS = ("csv", "jsonl", "nginx")
SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".log": "nginx"}

#: The fields of nginx's combined format a trace can be keyed by.
NGINX_KEYS = (
    "remote_addr",
    "remote_user",
    "request",
    "method",
    "path",
    "status",
    "http_referer",
    "http_user_agent",
)

_QUOTED = r'"((?:[^"\\]|\\.)*)"'
_COMBINED = re.compile(
    rf"(\S+) \S+ (\S+) \[([^\]]+)\] {_QUOTED} (\d{{3}}) (\S+) {_QUOTED} {_QUOTED}\s*$"
)
_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}

Source = str | Path | IO[str] | IO[bytes]


@dataclass(frozen=True)
class BadLine:
    """A line that could not be read: its number (from 1), why, and its start."""

    number: int
    reason: str
    text: str

    def __str__(self) -> str:
        return f"line {self.number}: {self.reason}: {self.text!r}"


class Loaded:
    """Events read from a file as they are iterated (once); see the module's docstring."""

    def __init__(
        self, lines: Iterable[str], parse: Callable[[str], Event | None], name: str, strict: bool
    ) -> None:
        self._lines = lines
        self._parse = parse
        self.name = name
        self.strict = strict
        self.lines = 0  # lines read so far
        self.bad_lines = 0
        self.bad: list[BadLine] = []

    def __iter__(self) -> Iterator[Event]:
        parse = self._parse
        number = 0
        for number, line in enumerate(self._lines, 1):
            try:
                event = parse(line)
            except (
                ValueError,
                TypeError,
                KeyError,
                IndexError,
                OverflowError,
                csv.Error,  # a field past the csv module's limit
                RecursionError,  # JSON nested too deeply
            ) as error:
                self._bad(number, str(error), line)
                continue
            if event is not None:
                yield event
        self.lines = number

    def _bad(self, number: int, reason: str, line: str) -> None:
        bad = BadLine(number, reason, line.rstrip("\r\n")[:120])
        if self.strict:
            raise TraceError(f"{self.name}:{bad.number}: {bad.reason}: {bad.text!r}")
        self.bad_lines += 1
        if len(self.bad) < KEEP_BAD:
            self.bad.append(bad)


def _text(source: Source) -> tuple[Iterable[str], str]:
    """Lines of ``source`` (a path, or a text or binary file) as text, and its name."""
    if isinstance(source, str | Path):
        path = Path(source)
        return _lines(path), str(path)
    name = str(getattr(source, "name", "<stream>"))
    if isinstance(source, io.TextIOBase):
        return source, name
    binary: Any = source
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace", newline=""), name


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8", errors="replace", newline="") as file:
        yield from file


def parse_time(text: str) -> float:
    """Seconds since the epoch from a number or an ISO 8601 date and time (UTC by default)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"time {text!r} is neither seconds nor ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _time(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"time {value!r} is not a time")
    when = float(value) if isinstance(value, int | float) else parse_time(str(value))
    if not isfinite(when):
        raise ValueError(f"time {value!r} is not finite")
    return when


def _cost(value: Any) -> int:
    """A cost as written (a number, or its text), checked as a store checks one."""
    if value is None or value == "":
        return 1
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"cost {value!r} is not a whole number")
    cost = int(value)
    if cost < 0:
        raise ValueError(f"cost {value!r} is negative")
    return check_cost(cost)


def read_csv(source: Source, *, strict: bool = False) -> Loaded:
    """Events from CSV lines ``time,key[,cost]``, with or without a header."""
    lines, name = _text(source)
    columns = {"time": 0, "key": 1, "cost": 2}
    first = True

    def parse(line: str) -> Event | None:
        nonlocal first, columns
        if not line.strip() or line.startswith("#"):
            return None
        row = next(csv.reader([line]))
        if first:
            first = False
            try:
                float(row[0])
            except ValueError:
                names = [cell.strip().lower() for cell in row]
                if "time" in names and "key" in names:
                    columns = {column: names.index(column) for column in names}
                    return None
        if len(row) < 2:
            raise ValueError(f"expected time,key[,cost]; got {len(row)} field")
        cost = row[columns["cost"]] if "cost" in columns and columns["cost"] < len(row) else None
        return _time(row[columns["time"]]), check_key(row[columns["key"]]), _cost(cost)

    return Loaded(lines, parse, name, strict)


def read_jsonl(source: Source, *, strict: bool = False) -> Loaded:
    """Events from JSON lines, each ``{"time", "key"[, "cost"]}`` or ``[time, key[, cost]]``."""
    lines, name = _text(source)

    def parse(line: str) -> Event | None:
        if not line.strip():
            return None
        item = json.loads(line)
        if isinstance(item, dict):
            return _time(item["time"]), check_key(item["key"]), _cost(item.get("cost"))
        if isinstance(item, list) and 2 <= len(item) <= 3:
            return _time(item[0]), check_key(item[1]), _cost(item[2] if len(item) == 3 else None)
        raise ValueError("expected an object with time and key, or [time, key, cost]")

    return Loaded(lines, parse, name, strict)


def read_nginx(source: Source, *, key: str = "remote_addr", strict: bool = False) -> Loaded:
    """Events from an nginx access log in the default ``combined`` format, keyed by ``key``
    (one of ``NGINX_KEYS``)."""
    if key not in NGINX_KEYS:
        raise TraceError(f"unknown nginx field {key!r}; expected one of {', '.join(NGINX_KEYS)}")
    lines, name = _text(source)
    days: dict[str, float] = {}  # "10/Oct/2000 -0700" -> its midnight, in epoch seconds
    field = {"remote_addr": 0, "remote_user": 1, "request": 3, "status": 4}.get(key)
    if key == "http_referer":
        field = 6
    elif key == "http_user_agent":
        field = 7
    match = _COMBINED.match

    def parse(line: str) -> Event | None:
        if not line.strip():
            return None
        found = match(line)
        if found is None:
            raise ValueError("not nginx's combined log format")
        parts = found.groups()
        stamp = parts[2]  # 10/Oct/2000:13:55:36 -0700
        day = stamp[:11] + stamp[20:]
        midnight = days.get(day)
        if midnight is None:
            midnight = days[day] = _midnight(stamp)
        clock = stamp[12:20]
        if len(stamp) != 26 or clock[2] != ":" or clock[5] != ":":
            raise ValueError(f"time {stamp!r} is not dd/Mon/yyyy:hh:mm:ss +zzzz")
        when = midnight + int(clock[:2]) * 3600 + int(clock[3:5]) * 60 + int(clock[6:])
        if field is not None:
            name = parts[field]
        else:
            request = parts[3].split(" ")
            if len(request) < 2:
                raise ValueError(f"request {parts[3]!r} has no method and path")
            name = request[0] if key == "method" else request[1].split("?", 1)[0]
        return float(when), check_key(name), 1

    return Loaded(lines, parse, name, strict)


def _midnight(stamp: str) -> float:
    """The epoch seconds of the midnight of ``dd/Mon/yyyy:hh:mm:ss +zzzz``, in its zone."""
    try:
        day, month, year = int(stamp[:2]), _MONTHS[stamp[3:6]], int(stamp[7:11])
        sign = -1 if stamp[21] == "-" else 1
        offset = sign * (int(stamp[22:24]) * 3600 + int(stamp[24:26]) * 60)
    except (KeyError, ValueError, IndexError):
        raise ValueError(f"time {stamp!r} is not dd/Mon/yyyy:hh:mm:ss +zzzz") from None
    if stamp[2] != "/" or stamp[6] != "/" or stamp[20] != " " or stamp[21] not in "+-":
        raise ValueError(f"time {stamp!r} is not dd/Mon/yyyy:hh:mm:ss +zzzz")
    return float(timegm((year, month, day, 0, 0, 0)) - offset)


def read_trace(
    source: Source, format: str | None = None, *, key: str = "remote_addr", strict: bool = False
) -> Loaded:
    """Events from ``source`` in ``format`` (``"csv"``, ``"jsonl"`` or ``"nginx"``; by default
    from the file's suffix: .csv, .jsonl/.ndjson/.json, .log). ``key`` is the nginx field."""
    if format is None:
        suffix = Path(str(getattr(source, "name", source))).suffix.lower()
        format = SUFFIXES.get(suffix)
        if format is None:
            raise TraceError(
                f"cannot tell the format of {source!s} from its suffix; name one of "
                f"{', '.join(FORMATS)}"
            )
    if format == "csv":
        return read_csv(source, strict=strict)
    if format == "jsonl":
        return read_jsonl(source, strict=strict)
    if format == "nginx":
        return read_nginx(source, key=key, strict=strict)
    raise TraceError(f"unknown trace format {format!r}; expected one of {', '.join(FORMATS)}")
