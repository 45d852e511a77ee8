"""A daemon thread that runs one action every so many seconds, until stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("ratekeeper.engine")


class Ticker:
    """Calls ``action`` every ``interval`` seconds on a daemon thread named ``name``.

    ``start()`` starts it; ``stop()`` stops it and waits for the thread. An exception from
    ``action`` is logged and the ticking goes on: a background duty must outlive a surprise.
    """

    def __init__(self, interval: float, action: Callable[[], object], name: str) -> None:
        self.interval = interval
        self.action = action
        self.name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.action()
            except Exception:
                log.exception("%s failed; trying again in %gs", self.name, self.interval)
