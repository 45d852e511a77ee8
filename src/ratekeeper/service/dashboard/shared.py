"""The dashboard's records of the worker processes of one service, in files they share.

With ``ratekeeper serve --workers N`` one worker answers each look at the dashboard, and each
worker has recorded only the decisions it made. So every second each worker writes its
``Shot`` (``ratekeeper.service.dashboard.recorder``) into the directory of the run's metrics
files, and the worker that answers reads the others' beside its own:

- ``dashboard_<pid>.json``: the seconds, the latency, the slots still filling and the
  request store's health, rewritten whole (a new file renamed over the old one) every second;
- ``dashboard_<pid>_<start>.json``: a slot once it is over, written once, read once by each
  reader (it does not change), removed by its writer once it is older than ``HISTORY``.

Each slot carries the latest decision of the keys it shows, with the time it was recorded: of
one key's decisions the reader keeps the newest, whichever file holds it. A worker that has
ended leaves its files: what it decided still counts, and its health no longer does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from ratekeeper.core.frequent import Summary
from ratekeeper.service.dashboard.recorder import HISTORY, SHOWN, SLOT, Latest, Shot, Slot
from ratekeeper.service.observe.multiprocess import alive

_CURRENT = re.compile(r"dashboard_(\d+)\.json")
_DONE = re.compile(r"dashboard_(\d+)_(\d+)\.json")


class SharedShots:
    """The records of the workers whose files are in ``directory`` (see the module)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._written: set[int] = set()  # this process's slots written as over
        self._read: dict[str, tuple[int, int, Slot, dict[str, Latest]]] = {}

    def publish(self, shot: Shot) -> None:
        """Write ``shot``, this process's record, for the others to read."""
        pid, now = shot.pid, shot.at
        filling = {}
        for start, slot in shot.slots.items():
            if start + SLOT > now:
                filling[start] = slot
            elif start not in self._written:
                self._write(f"dashboard_{pid}_{start}.json", _slot_data(slot, shot.latest))
                self._written.add(start)
        for start in [one for one in self._written if one + SLOT <= now - HISTORY]:
            self._written.discard(start)
            _remove(os.path.join(self.directory, f"dashboard_{pid}_{start}.json"))
        self._write(
            f"dashboard_{pid}.json",
            {
                "pid": pid,
                "at": now,
                "seconds": [[second, _pairs(counts)] for second, counts in shot.seconds],
                "latency": [[second, counts] for second, counts in shot.latency],
                "slots": {
                    str(start): _slot_data(slot, shot.latest) for start, slot in filling.items()
                },
                "health": shot.health,
                "started": shot.started,
            },
        )

    def others(self, pid: int) -> list[Shot]:
        """The records of every process but ``pid`` with files in the directory."""
        shots: dict[int, Shot] = {}
        done: dict[int, dict[int, tuple[Slot, dict[str, Latest]]]] = {}
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        seen = set()
        for name in names:
            found = _DONE.fullmatch(name)
            if found is not None:
                owner, start = int(found.group(1)), int(found.group(2))
                if owner != pid:
                    seen.add(name)
                    read = self._slot(name, owner, start)
                    if read is not None:
                        done.setdefault(owner, {})[start] = read
                continue
            found = _CURRENT.fullmatch(name)
            if found is not None and int(found.group(1)) != pid:
                data = _load(os.path.join(self.directory, name))
                if data is not None:
                    shots[int(found.group(1))] = _shot(data)
        for name in [one for one in self._read if one not in seen]:
            del self._read[name]
        for owner, slots in done.items():
            shot = shots.get(owner)
            if shot is None:
                shot = shots[owner] = Shot(owner, 0.0, [], [], {}, {}, None, alive(owner))
            latest = dict(shot.latest)
            for start, (slot, known) in slots.items():
                shot.slots.setdefault(start, slot)
                newest(latest, known)
            shot.latest = latest
        return list(shots.values())

    def _slot(self, name: str, owner: int, start: int) -> tuple[Slot, dict[str, Latest]] | None:
        read = self._read.get(name)
        if read is not None:
            return read[2], read[3]
        data = _load(os.path.join(self.directory, name))
        if data is None:
            return None
        slot, latest = _slot_of(data)
        self._read[name] = (owner, start, slot, latest)
        return slot, latest

    def _write(self, name: str, data: dict[str, Any]) -> None:
        path = os.path.join(self.directory, name)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(data, file, separators=(",", ":"))
        os.replace(temporary, path)


def newest(latest: dict[str, Latest], known: Mapping[str, Latest]) -> None:
    """Each decision of ``known`` put into ``latest``, unless ``latest`` holds one of its key
    recorded later."""
    for key, one in known.items():
        held = latest.get(key)
        if held is None or one[5] > held[5]:
            latest[key] = one


def _pairs(counts: Mapping[tuple[str, str, str], int]) -> list[list[Any]]:
    return [[domain, rule, result, n] for (domain, rule, result), n in counts.items()]


def _slot_data(slot: Slot, latest: Mapping[str, Latest]) -> dict[str, Any]:
    shown = {key for key, _ in slot.requests.top(SHOWN)} | {
        key for key, _ in slot.refused.top(SHOWN)
    }
    return {
        "requests": slot.requests.to_dict(),
        "refused": slot.refused.to_dict(),
        "latest": {key: list(latest[key]) for key in shown if key in latest},
    }


def _slot_of(data: dict[str, Any]) -> tuple[Slot, dict[str, Latest]]:
    slot = Slot(Summary.from_dict(data["requests"]), Summary.from_dict(data["refused"]))
    latest: dict[str, Latest] = {key: tuple(value) for key, value in data["latest"].items()}
    return slot, latest


def _shot(data: dict[str, Any]) -> Shot:
    pid = int(data["pid"])
    slots = {}
    latest: dict[str, Latest] = {}
    for start, one in data["slots"].items():
        slots[int(start)], known = _slot_of(one)
        newest(latest, known)
    return Shot(
        pid,
        float(data["at"]),
        [(second, {(d, r, res): n for d, r, res, n in pairs}) for second, pairs in data["seconds"]],
        [(second, counts) for second, counts in data["latency"]],
        slots,
        latest,
        data.get("health"),
        alive(pid),
        float(data.get("started", 0.0)),
    )


def _load(path: str) -> dict[str, Any] | None:
    """A file's record; None if it went away or is not whole (a writer renames it in place,
    so a partial file is one that was never renamed: it is not read)."""
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
