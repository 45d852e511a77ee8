"""The service's log: ``--log-level`` for ratekeeper's and uvicorn's messages, other libraries'
from warning unless ``--log-libraries`` names them, the access log at any level, the process
(and worker) on every line, and ``extra=`` fields in JSON and in text."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ratekeeper.service.observe.logs import JsonFormatter, TextFormatter, configure_logging
from tests.service.served import Served

CHECK = {
    "domain": "example",
    "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}],
}


def record(msg: str, *args: object, **extra: Any) -> logging.LogRecord:
    made = logging.LogRecord("ratekeeper.test", logging.WARNING, __file__, 1, msg, args, None)
    made.__dict__.update(extra)
    made.created, made.msecs = 1_700_000_000.25, 250.0
    return made


PID = os.getpid()


def test_json_lines_carry_the_extra_fields() -> None:
    line = JsonFormatter().format(record("refused %s", "x", domain="api", rule="per_user"))
    assert json.loads(line) == {
        "time": "2023-11-14T22:13:20.250Z",
        "level": "warning",
        "logger": "ratekeeper.test",
        "pid": PID,
        "message": "refused x",
        "domain": "api",
        "rule": "per_user",
    }


def test_a_workers_json_lines_name_it() -> None:
    line = json.loads(JsonFormatter(worker=2).format(record("plain")))
    assert list(line) == ["time", "level", "logger", "pid", "worker", "message"]
    assert (line["pid"], line["worker"]) == (PID, 2)


def test_text_lines_carry_the_extra_fields_after_the_message() -> None:
    line = TextFormatter().format(
        record("refused", domain="api", rule="generic_key=a/b", detail="two words", empty="")
    )
    assert line.endswith(
        f" WARNING pid={PID} ratekeeper.test: refused domain=api rule=generic_key=a/b"
        ' detail="two words" empty=""'
    )
    plain = TextFormatter().format(record("plain"))  # the time in the local time zone
    assert re.fullmatch(
        rf"[\d-]{{10}} [\d:]{{8}},250 WARNING pid={PID} ratekeeper.test: plain", plain
    )


def test_a_workers_text_lines_name_it_and_its_pid() -> None:
    line = TextFormatter(worker=2).format(record("plain", domain="api"))
    assert line.endswith(f" WARNING worker=2 pid={PID} ratekeeper.test: plain domain=api")


@pytest.fixture
def restored() -> Iterator[None]:
    """The loggers ``configure_logging`` sets, as they were."""
    names = [
        "",
        "ratekeeper",
        "uvicorn",
        "uvicorn.error",
        "uvicorn.access",
        "ratekeeper.access",
        "grpc",
        "asyncio",
    ]
    kept = [
        (logger, logger.level, logger.handlers[:], logger.propagate)
        for logger in map(logging.getLogger, names)
    ]
    yield
    for logger, level, handlers, propagate in kept:
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.propagate = propagate


@pytest.mark.usefixtures("restored")
@pytest.mark.parametrize(
    ("level", "shown"),
    [
        ("debug", ["debug", "info", "warning", "error"]),
        ("info", ["info", "warning", "error"]),
        ("warning", ["warning", "error"]),
        ("error", ["error"]),
    ],
)
def test_the_level_holds_for_ratekeeper_and_uvicorn_not_for_the_libraries_nor_the_access_log(
    level: str, shown: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("json", level)
    every = ("debug", "info", "warning", "error")
    named = ("ratekeeper.store", "uvicorn.error", "grpc._cython.cygrpc", "asyncio")
    for name in named:
        logger = logging.getLogger(name)
        for one in every:
            logger.log(logging.getLevelName(one.upper()), one)
    logging.getLogger("ratekeeper.access").info("POST /v1/check", extra={"status": 200})
    logging.getLogger("uvicorn.access").info("uvicorn's own access line")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    from_warning = [one for one in shown if one in ("warning", "error")]
    assert [(one["logger"], one["message"]) for one in lines] == [
        *((name, one) for name in named[:2] for one in shown),
        *((name, one) for name in named[2:] for one in from_warning),
        ("ratekeeper.access", "POST /v1/check"),
    ]


@pytest.mark.usefixtures("restored")
def test_the_libraries_named_follow_the_level_and_all_names_every_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def debug_lines() -> list[str]:
        for name in ("ratekeeper.store", "grpc._cython.cygrpc", "asyncio"):
            logging.getLogger(name).debug("debug")
        return [json.loads(line)["logger"] for line in capsys.readouterr().err.splitlines()]

    configure_logging("json", "debug", libraries=("grpc",))
    assert debug_lines() == ["ratekeeper.store", "grpc._cython.cygrpc"]
    configure_logging("json", "debug", libraries=("all",))
    assert debug_lines() == ["ratekeeper.store", "grpc._cython.cygrpc", "asyncio"]
    configure_logging("json", "debug")  # the libraries opened before are closed again
    assert debug_lines() == ["ratekeeper.store"]
    configure_logging("json", "info", libraries=("grpc",))
    assert debug_lines() == []


def served_log(tmp_path: Path, *flags: str, requests: int = 2) -> list[dict[str, Any]]:
    """The JSON log of ``ratekeeper serve`` with ``flags``, asked ``requests`` checks and one
    ``auth_request`` nginx could not describe (a warning), then stopped."""
    served = Served(tmp_path, "--log-format", "json", *flags, stderr=subprocess.PIPE)
    try:
        for _ in range(requests):
            assert httpx.post(f"{served.url}/v1/check", json=CHECK).status_code == 200
        assert httpx.get(f"{served.url}/v1/nginx").status_code == 403
    finally:
        assert served.stop() == 0
    return [json.loads(line) for line in served.log().splitlines()]


def test_serve_at_warning_logs_no_info_line_but_the_access_log_asked_for(tmp_path: Path) -> None:
    lines = served_log(tmp_path, "--log-level", "warning", "--access-log")
    levels = {(one["logger"], one["level"]) for one in lines}
    assert levels == {("ratekeeper.service", "warning"), ("ratekeeper.access", "info")}, lines
    access = [one for one in lines if one["logger"] == "ratekeeper.access"]
    assert [
        {k: v for k, v in one.items() if k not in ("time", "duration_ms")} for one in access
    ] == [
        {
            "level": "info",
            "logger": "ratekeeper.access",
            "pid": access[0]["pid"],
            "message": "POST /v1/check",
            "surface": "http",
            "status": 200,
            "domain": "example",
            "rule": "remote_address",
            "result": "allowed",
        }
    ] * 2 + [
        {
            "level": "info",
            "logger": "ratekeeper.access",
            "pid": access[0]["pid"],
            "message": "GET /v1/nginx",
            "surface": "nginx",
            "status": 403,
        }
    ]
    assert all(one["duration_ms"] >= 0 for one in access)
    assert "10.0.0.1" not in json.dumps(lines)


def test_serve_at_debug_logs_debug_lines_and_no_access_log_unless_asked(tmp_path: Path) -> None:
    lines = served_log(tmp_path, "--log-level", "debug")
    debug = [one["message"] for one in lines if one["level"] == "debug"]
    assert any(message.startswith("rules of domain example: ") for message in debug), debug
    assert any(one["level"] == "info" and one["logger"] == "uvicorn.error" for one in lines)
    assert not any(one["logger"] == "ratekeeper.access" for one in lines)
    # each decision, and no line of grpc's, asyncio's or any other library's
    decided = [one for one in lines if one["logger"] == "ratekeeper.decisions"]
    assert [{k: v for k, v in one.items() if k not in ("time", "pid")} for one in decided] == [
        {
            "level": "debug",
            "logger": "ratekeeper.decisions",
            "message": "allowed",
            "domain": "example",
            "descriptor": 0,
            "rule": "remote_address",
            "limit": "100/minute (fixed_window)",
            "result": "allowed",
            "remaining": remaining,
        }
        for remaining in (99, 98)
    ]
    assert {one["logger"].split(".")[0] for one in lines} == {"ratekeeper", "uvicorn"}
    assert "10.0.0.1" not in json.dumps(lines)


def test_serve_with_log_keys_logs_each_decisions_key(tmp_path: Path) -> None:
    lines = served_log(tmp_path, "--log-level", "debug", "--log-keys", requests=1)
    (decided,) = [one for one in lines if one["logger"] == "ratekeeper.decisions"]
    assert decided["key"] == "example/remote_address:10.0.0.1"
    lines = served_log(tmp_path, "--log-level", "info", "--log-keys", requests=1)
    assert not any(one["logger"] == "ratekeeper.decisions" for one in lines)
    assert any(one["message"].startswith("--log-keys: no decision is logged") for one in lines)


def test_serve_refuses_a_level_it_does_not_know(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ratekeeper.cli", "serve", "--log-level", "verbose"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "verbose" in done.stderr
