"""What a forked child redoes: objects holding threads or locks renew them there.

A child of ``os.fork()`` has a copy of every object but only the thread that forked: the
parent's background threads are gone, and a lock another thread held at the fork stays held
forever. An object that holds either registers with ``renew_after_fork`` and gets its
``_after_fork()`` called in every child, before the child runs anything else.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class Renewable(Protocol):
    def _after_fork(self) -> None: ...


_objects: weakref.WeakSet[Renewable] = weakref.WeakSet()


def renew_after_fork(thing: Renewable) -> None:
    """Call ``thing._after_fork()`` in every child forked from now on, while ``thing`` lives."""
    _objects.add(thing)


def _renew() -> None:
    for thing in list(_objects):
        thing._after_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_renew)
