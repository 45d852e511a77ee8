"""Repeated log messages, logged once a window with a count: ``LogThrottle``.

A failure that lasts (a store down, a configuration store that does not answer) meets the code
that reports it again and again: every probe, every request, every tick. Logged each time, it
buries everything else; ``LogThrottle`` logs it once and counts the rest.

Each condition has a key: by default the message's template (``msg``, before ``%``
formatting), so that what the throttle holds is bounded by the templates in the code, never
by the values (keys, addresses) in the messages. For a key:

- an occurrence while no window is open is logged at once, and opens a window of ``window``
  seconds;
- an occurrence inside the window is counted, not logged;
- the first occurrence after the window ends is logged with the count of those not logged,
  ``"… 57 more in the last 60 s"``, and opens a new window;
- ``clear(key)`` says the condition is over: an occurrence still counted is logged then (the
  latest, with the count of the others), and the key is forgotten, so that the next occurrence
  is logged at once;
- ``forget(key)`` says it too, for a caller that logs a line of its own for the end (a store
  reachable again): nothing is logged, the key is forgotten, and the count of the occurrences
  not logged is returned, for that line to carry.

So that every occurrence is accounted for: the occurrences of a key are the lines logged for it
plus the counts they carry (and the count ``forget`` returned). A count waits for the next line
of its key (the next occurrence after the window, ``clear`` or ``forget``): nothing is logged
from a timer. At most ``most`` keys are held; past it, the oldest is cleared to make room.
Thread-safe; messages are logged outside the lock.

>>> import logging
>>> throttle = LogThrottle(logging.getLogger("ratekeeper.store"))
>>> throttle.log(logging.ERROR, "store down: %s", "refused")  # logged
True
>>> throttle.log(logging.ERROR, "store down: %s", "refused")  # counted
False
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from ratekeeper.core.forks import renew_after_fork

#: Seconds during which repeats of a message are counted rather than logged.
WINDOW = 60.0
#: Keys held at most by one throttle.
MOST = 100

#: What a count adds to a message.
_SUFFIX = " (… %d more in the last %.0f s)"


@dataclass
class _Repeats:
    """One key's window: when it opened, the occurrences counted in it, and the latest of
    them (its level, template, arguments and extra fields)."""

    opened: float
    counted: int = 0
    level: int = logging.NOTSET
    msg: str = ""
    args: tuple[Any, ...] = ()
    extra: Mapping[str, Any] | None = None


#: A line to log: level, template, arguments, extra fields, exc_info.
_Line = tuple[int, str, tuple[Any, ...], Mapping[str, Any] | None, Any]


class LogThrottle:
    """Repeats of a message to ``logger`` counted over ``window`` seconds of ``clock`` (see
    the module). ``window`` is a finite number above 0 and ``most`` an int of at least 1,
    else ``ValueError``."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        window: float = WINDOW,
        most: int = MOST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, int | float) or not 0 < window < 1e9:
            raise ValueError(f"window must be a number of seconds above 0, not {window!r}")
        if isinstance(most, bool) or not isinstance(most, int) or most < 1:
            raise ValueError(f"most must be an integer of at least 1, not {most!r}")
        self.logger = logger
        self.window = float(window)
        self.most = most
        self.clock = clock
        self._keys: dict[Hashable, _Repeats] = {}
        self._lock = threading.Lock()
        renew_after_fork(self)

    def log(
        self,
        level: int,
        msg: str,
        *args: Any,
        key: Hashable = None,
        extra: Mapping[str, Any] | None = None,
        exc_info: Any = None,
    ) -> bool:
        """One occurrence of the condition ``key`` (``msg`` when None), reported as
        ``logger.log(level, msg, *args, extra=extra, exc_info=exc_info)``; True when it was
        logged now, False when it was counted."""
        if not self.logger.isEnabledFor(level):
            return False
        key = msg if key is None else key
        now = self.clock()
        lines: list[_Line] = []
        with self._lock:
            repeats = self._keys.get(key)
            if repeats is not None and now - repeats.opened < self.window:
                repeats.counted += 1
                repeats.level, repeats.msg, repeats.args = level, msg, args
                repeats.extra = extra
                return False
            if repeats is None:
                if len(self._keys) >= self.most:
                    oldest = next(iter(self._keys))
                    lines.extend(self._owed(self._keys.pop(oldest), now))
                self._keys[key] = _Repeats(now)
                lines.append((level, msg, args, extra, exc_info))
            else:
                counted = repeats.counted
                if counted:
                    since = now - repeats.opened
                    lines.append((level, msg + _SUFFIX, (*args, counted, since), extra, exc_info))
                else:
                    lines.append((level, msg, args, extra, exc_info))
                self._keys[key] = _Repeats(now)
        self._emit(lines)
        return True

    def clear(self, key: Hashable) -> bool:
        """The condition ``key`` is over: log the latest occurrence still counted, with the
        count of the others, and forget the key. True when the key was held."""
        with self._lock:
            repeats = self._keys.pop(key, None)
            lines = [] if repeats is None else self._owed(repeats, self.clock())
        self._emit(lines)
        return repeats is not None

    def forget(self, key: Hashable) -> int:
        """The condition ``key`` is over, and the caller's own line says so: forget the key,
        log nothing, and return the count of its occurrences not logged (0 when none, or when
        the key was not held)."""
        with self._lock:
            repeats = self._keys.pop(key, None)
        return 0 if repeats is None else repeats.counted

    def holds(self, key: Hashable) -> bool:
        """Whether the condition ``key`` has occurred since it was last cleared (and is held)."""
        return key in self._keys

    def _owed(self, repeats: _Repeats, now: float) -> list[_Line]:
        """The line owed for ``repeats``: its latest occurrence, with the count of the others
        when there are any; none when nothing was counted."""
        counted = repeats.counted
        if not counted:
            return []
        msg, args = repeats.msg, repeats.args
        if counted > 1:
            msg, args = msg + _SUFFIX, (*args, counted - 1, now - repeats.opened)
        return [(repeats.level, msg, args, repeats.extra, None)]

    def _emit(self, lines: list[_Line]) -> None:
        for level, msg, args, extra, exc_info in lines:
            self.logger.log(level, msg, *args, extra=extra, exc_info=exc_info, stacklevel=3)

    def _after_fork(self) -> None:
        # Another thread may have held the lock at the fork: the child's would stay held.
        self._lock = threading.Lock()
