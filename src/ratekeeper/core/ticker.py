"""A daemon thread that runs one action every so many seconds, until stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ratekeeper.core.forks import renew_after_fork
from ratekeeper.core.log_throttle import LogThrottle

log = logging.getLogger("ratekeeper.engine")

#: The throttle's key of an action that fails (with its traceback, once a minute).
FAILED = "%s failed; trying again every %gs"


class Ticker:
    """Calls ``action`` every ``interval`` seconds on a daemon thread named ``name``, logging
    to ``logger`` (default ``ratekeeper.engine``).

    ``start()`` starts it, and does nothing while it runs; ``stop()`` stops it and waits for the
    thread; either may be called again. A forked child has no thread until ``start()``. An
    exception from ``action`` is logged and the ticking goes on: a background duty must
    outlive a surprise. An action that keeps failing is logged with its traceback once a
    minute, with the count of the failures not logged (``LogThrottle``), and once when it
    works again.
    """

    def __init__(
        self,
        interval: float,
        action: Callable[[], object],
        name: str,
        logger: logging.Logger = log,
    ) -> None:
        self.interval = interval
        self.action = action
        self.name = name
        self.log = logger
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = LogThrottle(logger)
        renew_after_fork(self)

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._stop,), name=self.name, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        """Whether the thread runs (in this process)."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self, stop: threading.Event) -> None:
        failing = self._failing
        while not stop.wait(self.interval):
            try:
                self.action()
            except Exception:
                failing.log(logging.ERROR, FAILED, self.name, self.interval, exc_info=True)
            else:
                if failing.holds(FAILED):
                    failing.clear(FAILED)
                    self.log.warning("%s works again", self.name)

    def _after_fork(self) -> None:
        # The thread did not survive, and its event's lock may be held for ever.
        self._stop = threading.Event()
        self._thread = None
