"""Metrics that add up over the worker processes of one service, in prometheus_client's
multiprocess files.

With ``ratekeeper serve --workers N``, one worker answers each scrape. So that every scrape
reports the whole service, each worker writes its figures into files of its own, in the
directory that ``PROMETHEUS_MULTIPROC_DIR`` names (``shared_directory()`` makes a fresh one
for the run before the workers start, and removes it at exit), and the worker that answers a
scrape reads them all (``SharedCollector``):

- A counter is the sum of the workers' counts. The decisions and the latency histogram are
  written as they happen; the figures read when scraped (``ratekeeper.service.observe.scraped``) are
  published by each worker every ``PUBLISH_INTERVAL`` seconds, and by the answering worker
  just before it reads (``Published``). A worker's files keep its counts after it has ended,
  so no total goes down when a worker stops or uvicorn replaces one.
- A gauge combines over the live workers as ``scraped.COMBINE`` says. The gauges of a process
  that has ended are dropped before every read (``drop_ended``) and by a worker that stops
  (``mark_process_dead``).

prometheus_client writes its files in place of its in-process values only when
``PROMETHEUS_MULTIPROC_DIR`` is set before it is first imported: ``directory()`` checks that
it was.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import Counter, Gauge, values
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.samples import Sample

from ratekeeper.service.observe.scraped import COMBINE

#: The environment variable naming the directory of the multiprocess files.
VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
#: Seconds between a worker's publications of the figures read when scraped.
PUBLISH_INTERVAL = 1.0

# prometheus_client names a live gauge's file gauge_<mode>_<pid>.db
_LIVE_GAUGES = re.compile(r"gauge_live[a-z]+_(\d+)\.db")

__all__ = [
    "PUBLISH_INTERVAL",
    "VARIABLE",
    "Published",
    "SharedCollector",
    "alive",
    "directory",
    "drop_ended",
    "drop_gauges",
    "shared_directory",
]


@contextmanager
def shared_directory() -> Iterator[str]:
    """A fresh directory, readable by this user only, named by ``PROMETHEUS_MULTIPROC_DIR``
    while the block runs (the worker processes it starts inherit it); afterwards the
    variable is as it was and the directory is removed with its files."""
    path = tempfile.mkdtemp(prefix="ratekeeper-metrics-")
    previous = os.environ.get(VARIABLE)
    os.environ[VARIABLE] = path
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = previous
        shutil.rmtree(path, ignore_errors=True)


def directory() -> str:
    """The directory of this process's multiprocess files; ``ValueError`` when
    ``PROMETHEUS_MULTIPROC_DIR`` names none, or was set after prometheus_client was
    imported (its metrics would then count in this process only)."""
    path = os.environ.get(VARIABLE, "")
    if not path or not os.path.isdir(path):
        raise ValueError(f"{VARIABLE} must name a directory for the workers' metrics, not {path!r}")
    if not getattr(values.ValueClass, "_multiprocess", False):
        raise ValueError(
            f"prometheus_client was imported before {VARIABLE} was set, so it counts in this "
            "process only: set it before the process starts"
        )
    return path


def drop_ended(path: str) -> None:
    """Drop the gauges of every process with files in ``path`` that has ended."""
    pids = set()
    for name in os.listdir(path):
        found = _LIVE_GAUGES.fullmatch(name)
        if found is not None:
            pids.add(int(found.group(1)))
    for pid in pids:
        if not alive(pid):
            drop_gauges(pid, path)


def drop_gauges(pid: int, path: str) -> None:
    """Drop process ``pid``'s gauges from the files in ``path``; its counts stay."""
    mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


class SharedCollector:
    """Every process's figures in ``path``, as one: ``before()`` (this process publishing
    its own) is called first, then the gauges of the processes that have ended are
    dropped."""

    def __init__(self, path: str, before: Callable[[], None]) -> None:
        self.path = path
        self.before = before

    def collect(self) -> Iterable[Metric]:
        self.before()
        drop_ended(self.path)
        merged: Iterable[Metric] = MultiProcessCollector.merge(metrics_files(self.path))  # type: ignore[no-untyped-call]
        return merged


#: The files prometheus_client writes for a process's metrics (``counter_<pid>.db``, ...).
_METRICS_FILE = re.compile(r"(counter|gauge|histogram|summary)_\w+\.db")


def metrics_files(path: str) -> list[str]:
    """The metrics files in ``path`` that hold something: not the run's other files (the
    dashboard's records, a configuration store), and not a file a process has just created
    and not yet sized, which reading would take for a corrupt one and fail the whole scrape."""
    found = []
    for name in os.listdir(path):
        if _METRICS_FILE.fullmatch(name) is None:
            continue
        try:
            if os.path.getsize(os.path.join(path, name)) > 0:
                found.append(os.path.join(path, name))
        except FileNotFoundError:  # a live gauge's, dropped since
            continue
    return found


class Published:
    """The figures of one process, published into its multiprocess files as they were read:
    a counter by its increase since the last publication (a figure that went down adds
    nothing), a gauge as it is, in its mode of ``COMBINE``. Not thread-safe."""

    def __init__(self) -> None:
        self._parents: dict[str, Counter | Gauge] = {}
        self._children: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._published: dict[tuple[str, tuple[str, ...]], float] = {}  # a counter's, so far

    def publish(self, families: Iterable[Metric]) -> None:
        for family in families:
            for sample in family.samples:
                key = (family.name, tuple(sample.labels.values()))
                child = self._children.get(key)
                if child is None:
                    child = self._children[key] = self._child(family, sample)
                if family.type != "counter":
                    child.set(sample.value)
                    continue
                published = self._published.get(key, 0.0)
                if sample.value > published:
                    child.inc(sample.value - published)
                    self._published[key] = sample.value

    def _child(self, family: Metric, sample: Sample) -> Any:
        """The counter or gauge (in its mode of ``COMBINE``) ``sample`` is published into."""
        parent = self._parents.get(family.name)
        if parent is None:
            labels = list(sample.labels)
            parent = self._parents[family.name] = (
                Counter(family.name, family.documentation, labels, registry=None)
                if family.type == "counter"
                else Gauge(
                    family.name,
                    family.documentation,
                    labels,
                    registry=None,
                    multiprocess_mode=COMBINE[family.name],
                )
            )
        return parent.labels(**sample.labels) if sample.labels else parent
