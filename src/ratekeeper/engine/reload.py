"""Hot reload of rule files: a watcher that polls them and swaps in the new rules.

A file is seen as changed when its modification time, change time, size or inode changes (an
editor's atomic rename included, and a write in place that keeps the size and sets the
modification time back, as ``touch -r`` does: the change time cannot be set), and a directory
when a rule file in it appears, goes or changes. A file that fails validation leaves the
previous rules in force: the error is logged and counted. So does a reload that would load no
rule where rules were in force (a directory emptied, or a symlink swapped to a version whose
files are not rule files): it would let every request through unnoticed.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ratekeeper.core.errors import ConfigError
from ratekeeper.core.ticker import Ticker
from ratekeeper.core.wording import many

if TYPE_CHECKING:
    from ratekeeper.rules import RuleSet

log = logging.getLogger("ratekeeper.rules")

Signature = tuple[tuple[str, int, int, int, int] | tuple[str], ...]


def signature(paths: Sequence[Path]) -> Signature:
    """What the watcher compares: each rule file's path, mtime, ctime, size and inode."""
    seen: list[tuple[str, int, int, int, int] | tuple[str]] = []
    for path in paths:
        files = (
            sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
            if path.is_dir()
            else [path]
        )
        for file in files:
            try:
                stat = file.stat()
            except OSError:
                seen.append((str(file),))
            else:
                seen.append(
                    (str(file), stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)
                )
    return tuple(seen)


class RuleWatcher:
    """Reloads the rule files ``paths`` when they change, and hands new rules to ``apply``.

    ``check()`` looks once; ``start()`` runs it every ``interval`` seconds on a daemon thread
    until ``stop()``. ``merge_domains`` loads them as ``load_rules`` does with it; ``loaded``
    is the number of rules in force at the start (a reload to none is refused unless it is
    0). ``reloads``
    and ``errors`` count successful and failed reloads; ``last_error`` keeps the latest
    failure's message (None once a reload succeeds), ``last_error_at`` and ``last_reload_at``
    when the latest failure and the latest reload happened (``time.time()``; None before any).
    """

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]],
        apply: Callable[[RuleSet], None],
        interval: float = 1.0,
        *,
        merge_domains: bool = False,
        loaded: int = 0,
    ) -> None:
        self.paths = [Path(path) for path in paths]
        self.merge_domains = merge_domains
        self.loaded = loaded
        self.apply = apply
        self.interval = interval
        self.reloads = 0
        self.errors = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.last_reload_at: float | None = None
        self._seen = signature(self.paths)
        self._ticker = Ticker(interval, self.check, "ratekeeper-rules")

    def check(self) -> bool:
        """Reload if a file changed; True when new rules were applied."""
        from ratekeeper.rules import load_rules

        current = signature(self.paths)
        if current == self._seen:
            return False
        self._seen = current
        try:
            rules = load_rules(self.paths, merge_domains=self.merge_domains)
            if not rules and self.loaded:
                raise ConfigError(
                    f"{', '.join(map(str, self.paths))}: no rule files, or no rules in them, "
                    f"where {many(self.loaded, 'rule')} {'was' if self.loaded == 1 else 'were'} "
                    "loaded: an emptied rule directory is "
                    "refused, as it would let every request through"
                )
        except (ConfigError, OSError) as error:
            log.error("rule files not reloaded, the previous rules stay in force:\n%s", error)
            self.last_error = str(error)
            self.last_error_at = time.time()
            self.errors += 1  # counted last: whoever waits on the count sees the rest done
            return False
        self.apply(rules)
        self.loaded = len(rules)
        log.info(
            "rules reloaded from %s: %s", ", ".join(map(str, self.paths)), many(len(rules), "rule")
        )
        self.last_error = None
        self.last_reload_at = time.time()
        self.reloads += 1
        return True

    def start(self) -> None:
        self._ticker.start()

    def stop(self) -> None:
        self._ticker.stop()
