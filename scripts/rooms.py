"""A package's rooms and the arrows between them: ``python scripts/rooms.py ratekeeper.service``.

A room is a module or subpackage directly inside the package; an arrow joins two rooms when a
module of one imports a module of the other (type-only imports too, as ``lint-imports`` counts
them). The rooms are stacked on floors, each room one floor above the highest room it imports;
rooms that import each other, directly or around a circle, share a floor, and their arrows are
the arrows back up. An old import path kept for a while (a module that calls
``ratekeeper.core.moved.moved`` as it is imported) is no room: it is named apart. Prints the
rooms by floor, then one line: rooms, floors, arrows, arrows back up, modules and lines.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import grimp


def room_of(module: str, package: str) -> str | None:
    """The room of ``package`` that holds ``module``; None outside it or for the package."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1 :].split(".", 1)[0]


def circles(rooms: set[str], arrows: set[tuple[str, str]]) -> list[set[str]]:
    """The strongly connected groups of rooms (Tarjan's), each room in one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    out = defaultdict(list)
    for source, target in arrows:
        out[source].append(target)

    def visit(room: str) -> None:
        index[room] = low[room] = len(index)
        stack.append(room)
        on_stack.add(room)
        for target in out[room]:
            if target not in index:
                visit(target)
                low[room] = min(low[room], low[target])
            elif target in on_stack:
                low[room] = min(low[room], index[target])
        if low[room] == index[room]:
            group = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.add(top)
                if top == room:
                    break
            groups.append(group)

    for room in sorted(rooms):
        if room not in index:
            visit(room)
    return groups


#: The call an old import path makes as it is imported (``ratekeeper.core.moved``).
OLD = re.compile(r"^moved\(\s*__name__,", re.MULTILINE)


def source_of(module: str) -> Path:
    """The file of ``module``: its ``.py``, or its package's ``__init__.py``."""
    root = Path(__import__(module.split(".", maxsplit=1)[0]).__file__ or "").parent.parent
    path = root / (module.replace(".", "/") + ".py")
    return path if path.exists() else root / module.replace(".", "/") / "__init__.py"


def main(package: str) -> None:
    graph = grimp.build_graph(package.split(".", maxsplit=1)[0], include_external_packages=False)
    inside = [one for one in graph.modules if one == package or one.startswith(package + ".")]
    old = {one for one in inside if OLD.search(source_of(one).read_text())}
    modules = [one for one in inside if one not in old]
    rooms = {room for one in modules if (room := room_of(one, package)) is not None}
    arrows: set[tuple[str, str]] = set()
    for module in modules:
        source = room_of(module, package)
        if source is None:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            target = room_of(imported, package)
            if target is not None and target != source:
                arrows.add((source, target))
    group_of = {}
    for group in circles(rooms, arrows):
        for room in group:
            group_of[room] = frozenset(group)
    back_up = {(s, t) for s, t in arrows if group_of[s] == group_of[t]}
    floor: dict[frozenset[str], int] = {}

    def floor_of(group: frozenset[str]) -> int:
        if group not in floor:
            below = {group_of[t] for s, t in arrows if s in group and group_of[t] != group}
            floor[group] = 1 + max((floor_of(one) for one in below), default=-1)
        return floor[group]

    by_floor: dict[int, list[str]] = defaultdict(list)
    for room in rooms:
        by_floor[floor_of(group_of[room])].append(room)
    for level in sorted(by_floor, reverse=True):
        print(f"floor {level}: {', '.join(sorted(by_floor[level]))}")
    lines = sum(len(source_of(one).read_text().splitlines()) for one in modules)
    print(
        f"{package}: {len(rooms)} rooms on {len(by_floor)} floors, {len(arrows)} arrows, "
        f"{len(back_up)} back up; {len(modules)} modules, {lines} lines"
    )
    if old:
        print(f"old import paths, no rooms: {', '.join(sorted(old))}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ratekeeper")
