"""A configuration store built before a pre-fork server forks works in every worker.

The parent opens a store, uses it and subscribes to it, then forks with ``os.fork()`` as a
pre-fork server does. The child uses the very same object: it reads and writes through a
connection of its own, its change thread starts again, and it hears of a change the parent
makes after the fork. It reports through a pipe and its exit status. The parent's connection
is untouched by all this: the parent goes on using the store afterwards.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import pytest

from ratekeeper.config import ConfigStore, open_config_store
from ratekeeper.core.overrides import Override
from tests.config_stores import KINDS, fresh_store

FIVE, SIX, SEVEN = Override(5, 1), Override(6, 1), Override(7, 1)


def child(store: ConfigStore, changed: threading.Event, ready: int, go: int) -> None:
    """What the worker does; any failure raises."""
    assert store.get("before", "fork") == FIVE
    store.set("child", SIX, "fork")
    assert store.get("child", "fork") == SIX
    assert [key for _, key, _ in store.items("fork")] == ["before", "child"]
    threads = [t.name for t in threading.enumerate() if t.name.startswith("ratekeeper-")]
    assert len(threads) == 1, threads  # the change thread runs again, in this process
    changed.clear()
    os.write(ready, b"1")
    assert os.read(go, 1) == b"1"  # the parent has written "parent"
    assert changed.wait(10), "the change made by the parent was not reported"
    store.close()
    store.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
def test_a_store_opened_before_a_fork_works_in_the_child(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url, options = fresh_store(kind, request, tmp_path)
    store = open_config_store(url, **options)
    changed = threading.Event()
    store.subscribe(lambda domain, key: changed.set())
    store.set("before", FIVE, "fork")  # the parent's connection is open when it forks
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    report_r, report_w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads (3.12+)
        pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        status = 1
        try:
            child(store, changed, ready_w, go_r)
            status = 0
        except BaseException as error:
            os.write(report_w, repr(error).encode()[:4000])
        finally:
            os._exit(status)
    for fd in (ready_w, go_r, report_w):
        os.close(fd)
    try:
        assert os.read(ready_r, 1) == b"1", os.read(report_r, 4000).decode()
        writer = open_config_store(url, **options)  # another instance
        writer.set("parent", SEVEN, "fork")
        writer.close()
        os.write(go_w, b"1")
        _, status = os.waitpid(pid, 0)
        report = os.read(report_r, 4000).decode()
        assert os.waitstatus_to_exitcode(status) == 0, report
    finally:
        for fd in (ready_r, go_w, report_r):
            os.close(fd)
    # The parent's own connection and thread were left alone by the child.
    assert store.get("child", "fork") == SIX
    store.set("after", SEVEN, "fork")
    assert [key for _, key, _ in store.items("fork")] == ["after", "before", "child", "parent"]
    store.close()


def test_a_store_built_before_a_fork_and_never_used_opens_in_the_child(
    tmp_path: Path,
) -> None:
    store = open_config_store(f"sqlite:///{tmp_path / 'config.db'}")
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            store.set("child", SIX)
            status = 0 if store.get("child") == SIX else 2
            store.close()
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.get("child") == SIX
    store.close()
