"""``ratekeeper serve --server pyvoy``: the whole service in one Envoy, through pyvoy.

pyvoy runs an ``envoy`` process that loads Python as a dynamic module and serves an ASGI app
on Envoy's HTTP/1.1 and HTTP/2 (h2c). ``run`` starts it on the HTTP address with
``ratekeeper.service.runtime.pyvoy_app:app``, which that process builds from the ``RATEKEEPER_*``
variables ``run`` passes: HTTP, nginx ``auth_request`` and Envoy's gRPC on one address, one
engine and one store. It runs the app's lifespan (the store opened, the rule files watched;
at the end the engine and its stores closed), and logs where it listens. On SIGTERM it has
Envoy stop listening (its admin interface's ``/drain_listeners``), waits for the requests
under way to be answered (Envoy's count of them, ``grace`` seconds at most), then stops Envoy,
which shuts the lifespan down and exits; it returns 0 after logging ``stopped``. A SIGTERM
during the start does the same once Envoy has started.

pyvoy's Python runs on one event loop: ``worker_threads`` is 1, because pyvoy gives every
further thread an event loop and a lifespan of its own over the same app, and the engine
belongs to the loop that started it. Envoy's own worker threads carry the connections.

pyvoy is the ``pyvoy`` extra, imported here only: without it ``MissingExtraError`` names it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import urllib.parse
import urllib.request
from typing import Any, Literal

from ratekeeper.core.errors import MissingExtraError
from ratekeeper.service.runtime.settings import Settings

log = logging.getLogger("ratekeeper.service")

#: What pyvoy imports in the Envoy process.
APP = "ratekeeper.service.runtime.pyvoy_app:app"
#: Envoy's count of the requests under way on the listener pyvoy configures.
ACTIVE = "http.ingress_http.downstream_rq_active"


def require_pyvoy() -> None:
    """Raise ``MissingExtraError`` unless pyvoy is installed."""
    try:
        import pyvoy  # noqa: F401
    except ImportError:
        raise MissingExtraError("pyvoy", "pyvoy") from None


def _loop() -> Literal["uvloop", "asyncio"]:
    """uvloop when installed (the ``server`` extra installs it), as uvicorn picks it."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def run(settings: Settings, environ: dict[str, str], grace: float) -> int:
    """Serve ``settings`` on pyvoy, the app built from ``environ`` (``RATEKEEPER_*``), until
    SIGTERM, then stop after the requests in flight, waiting ``grace`` seconds at most; 0
    after it, 3 if Envoy could not start, 1 if it ended on its own."""
    require_pyvoy()
    return asyncio.run(_run(settings, environ, grace))


def _admin(address: str, path: str, method: str = "GET") -> str:
    """What Envoy's admin interface at ``address`` answers ``method path``."""
    request = urllib.request.Request(f"http://{address}{path}", method=method)
    with urllib.request.urlopen(request, timeout=2) as answer:
        text: str = answer.read().decode()
    return text


def _active(address: str) -> int:
    """The requests under way in Envoy (0 when it does not say)."""
    pattern = urllib.parse.quote("^" + ACTIVE.replace(".", r"\.") + "$")
    for line in _admin(address, f"/stats?filter={pattern}").splitlines():
        name, _, value = line.partition(": ")
        if name == ACTIVE:
            return int(value)
    return 0


async def drain(server: Any, grace: float) -> None:
    """Have ``server``'s Envoy stop accepting connections and wait, ``grace`` seconds at most,
    until no request is under way. Without its admin interface, nothing is waited for."""
    address = getattr(server, "_admin_address", None)  # pyvoy keeps it, unpublished
    if not address:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    try:
        await asyncio.to_thread(_admin, address, "/drain_listeners", "POST")
        while await asyncio.to_thread(_active, address) > 0 and loop.time() < deadline:
            await asyncio.sleep(0.05)
    except (OSError, ValueError) as error:  # Envoy gone or not answering: stop it now
        log.warning("could not wait for the requests in flight: %s", error)


async def _run(settings: Settings, environ: dict[str, str], grace: float) -> int:
    from pyvoy import PyvoyServer, StartupError

    server = PyvoyServer(
        APP,
        address=settings.http.host,
        port=settings.http.port,
        worker_threads=1,
        lifespan=True,
        loop=_loop(),
        log_level="error",
        env=environ,
        stdout=None,  # the app's log and Envoy's errors go where this process's go
        stderr=None,
    )
    stopping: list[asyncio.Future[None]] = []
    started = asked = False

    async def stop_after_drain() -> None:
        await drain(server, grace)
        await server.stop()  # SIGTERM: Envoy shuts the app's lifespan down, then exits

    def stop() -> None:
        nonlocal asked
        asked = True
        if started and not stopping:  # else the start's end stops it
            stopping.append(asyncio.ensure_future(stop_after_drain()))

    # Taken from before Envoy starts: a SIGTERM during the start (Envoy already answering, the
    # start not yet returned) stops it once started, rather than killing this process (status
    # -15) and Envoy with it, the app's lifespan never shut down.
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop)
    try:
        try:
            await server.start()
        except StartupError:
            log.error("could not serve on pyvoy at http://%s: see the lines above", settings.http)
            return 3
        started = True
        if asked:
            stop()
        try:
            log.info("listening on http://%s (HTTP and gRPC, on pyvoy)", settings.http)
            if settings.dashboard:
                log.info(
                    "dashboard: http://%s/dashboard (sign in with the admin token)", settings.http
                )
            code = await server.wait()
        finally:
            await asyncio.shield(server.stop())
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    if not asked:
        log.error("Envoy (pyvoy) ended on its own with status %s", code)
        return 1
    log.info("stopped")
    return 0
