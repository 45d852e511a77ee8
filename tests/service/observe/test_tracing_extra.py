"""Traces are the ``tracing`` extra: without ``--tracing`` the service imports no OpenTelemetry
package, and asked for them without the extra it stops at once, naming the pip command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.served import Served

#: Builds the service as ``serve`` does (its ``RATEKEEPER_*`` variables as given), starts it,
#: decides one request over HTTP, stops it, and prints the OpenTelemetry modules imported.
SERVE_ONE = """
import asyncio, json, sys
import httpx
from ratekeeper.service.runtime.app import build_parts
from ratekeeper.service.runtime.settings import Settings

parts = build_parts(Settings.read(None), grpc_aio=False)

async def main():
    async with parts.http.router.lifespan_context(parts.http):
        transport = httpx.ASGITransport(app=parts.http)
        async with httpx.AsyncClient(transport=transport, base_url="http://rk") as client:
            answer = await client.post("/v1/check", json={"key": "k"})
            assert answer.status_code == 200, answer.status_code

asyncio.run(main())
print(json.dumps(sorted(name for name in sys.modules if name.startswith("opentelemetry"))))
"""


def run(code: str, **environ: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RATEKEEPER_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "RATEKEEPER_CONFIG": "sqlite://:memory:", **environ},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("tracing", ["off", "otlp-http"])
def test_opentelemetry_is_imported_only_when_tracing_is_on(tracing: str) -> None:
    # the collector is nowhere: the span is dropped at the stop, quietly enough
    done = run(
        SERVE_ONE,
        RATEKEEPER_TRACING=tracing,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
    )
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout)
    if tracing == "off":
        assert imported == []
    else:
        assert {"opentelemetry.sdk.trace", "opentelemetry.propagate"} <= set(imported)


def test_tracing_without_the_extra_stops_the_start_naming_the_pip_command() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry.sdk.trace'] = None  # as if opentelemetry-sdk were absent\n"
        "from ratekeeper.cli import main\n"
        "sys.exit(main(['serve', '--tracing', 'otlp-grpc']))\n"
    )
    done = run(code)
    assert done.returncode == 3  # the environment's fault, as a missing server extra
    assert done.stderr == (
        "error: opentelemetry-sdk is not installed; install it with: "
        "pip install 'ratekeeper[tracing]'\n"
    )


def test_tracing_settings_given_while_it_is_off_are_one_warning(tmp_path: Path) -> None:
    service = Served(
        tmp_path,
        "--trace-sample-rate",
        "0.5",
        "--config",
        "sqlite://:memory:",
        environ={"RATEKEEPER_TRACE_SERVICE_NAME": "edge"},
        stderr=subprocess.PIPE,
    )
    stopped = service.stop()
    log = service.log()
    assert stopped == 0
    warnings = [line for line in log.splitlines() if "tracing is off" in line]
    assert [line.split("ratekeeper.service: ", 1)[1] for line in warnings] == [
        "--trace-sample-rate, --trace-service-name (from $RATEKEEPER_TRACE_SERVICE_NAME): not "
        "used: tracing is off (--tracing otlp-http or otlp-grpc)"
    ]
    assert " WARNING " in warnings[0]
