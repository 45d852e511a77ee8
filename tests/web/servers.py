"""Web apps served by real servers on free loopback ports, for the tests: uvicorn (ASGI) and
waitress (WSGI), each in a thread of the test's process, stopped when the block ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.servers import free_port


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within 30 s")
        time.sleep(0.02)


@contextmanager
def uvicorn_serving(app: Any) -> Iterator[str]:
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "uvicorn's start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def waitress_serving(app: Any, **options: Any) -> Iterator[str]:
    """``app`` served by waitress on a free loopback port, with waitress's ``options``."""
    import waitress

    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=8, **options)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    def stop() -> None:
        """Close every socket from the server's own loop, which then ends: a socket closed
        from another thread while the loop polls it fails the poll (EBADF)."""
        for channel in list(server.active_channels.values()):
            channel.handle_close()
        server.close()

    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        server.task_dispatcher.shutdown()  # first: no worker pulls the trigger once it is shut
        try:
            server.trigger.pull_trigger(stop)
        except OSError:  # the loop closed its trigger itself (on a poll error): close from here
            stop()
        thread.join(timeout=30)
