"""The decision service's log: ratekeeper's and uvicorn's messages on stderr, at one level.

``configure_logging(log_format, log_level)`` sends every record to stderr, as text lines or as
JSON lines (``--log-format``). ratekeeper's own loggers and uvicorn's log from ``log_level`` up
(``--log-level``: debug, info, warning or error); every other library's (grpc, asyncio, redis,
httpx, ...) logs from warning (or from ``log_level`` when it is higher), unless ``libraries``
(``--log-libraries``) names its logger, or is ``all``: then it follows ``log_level`` too. So
``--log-level debug`` shows ratekeeper's debug lines (the decisions among them) without a grpc
line per call. uvicorn's own access log stays off: the service's
(``ratekeeper.service.observe.access``, ``--access-log``) says more, and is not bound by the
level: asked for, it is logged at any level.

Every line names the process that wrote it: ``pid``, and for a worker of ``--workers N``,
``worker`` (``worker_number()``: 1, 2, ...). Fields passed with ``extra=`` go with the record:
in JSON as fields of their own, beside ``time``, ``level``, ``logger``, ``pid``, ``worker``
and ``message`` (and ``error``, a traceback); in text as ``name=value`` after the message
(``time level [worker=N] pid=P logger: message name=value ...``). So a warning about a
decision can carry its ``domain`` and ``rule``, and the access log its fields.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

#: ``--log-level``'s values, and the level each sets.
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

#: The logger of the access log (``ratekeeper.service.observe.access``).
ACCESS = "ratekeeper.access"

#: The loggers that follow ``--log-level``: ratekeeper's and uvicorn's (its start, its stop,
#: its errors); any other logs from warning unless ``--log-libraries`` names it.
OWN = ("ratekeeper", "uvicorn", "uvicorn.error")

#: ``--log-libraries``'s value for every library's logger.
ALL = "all"

#: The attributes every ``LogRecord`` has (and uvicorn's colored twin of its messages): what a
#: record holds beyond them came with ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}


#: What makes a text field's value quoted.
_QUOTED = re.compile(r"[\s\"']")


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields ``record`` was given with ``extra=``, in the order given."""
    return {name: value for name, value in vars(record).items() if name not in _STANDARD}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (UTC, milliseconds), ``level``, ``logger``, ``pid``,
    ``worker`` (when given one), ``message``, the ``extra=`` fields, and ``error`` with the
    traceback if there is one."""

    def __init__(self, worker: int | None = None) -> None:
        super().__init__()
        self.worker = worker

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
        }
        if self.worker is not None:
            entry["worker"] = self.worker
        entry["message"] = record.getMessage()
        for name, value in extra_fields(record).items():
            entry.setdefault(name, value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time level [worker=N] pid=P logger: message name=value …``: the worker when given
    one, the process id, and the ``extra=`` fields after the message (a value with a space or
    a quote in it quoted, as JSON)."""

    def __init__(self, worker: int | None = None) -> None:
        who = "pid=%(process)d" if worker is None else f"worker={worker} pid=%(process)d"
        super().__init__(f"%(asctime)s %(levelname)s {who} %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        fields = extra_fields(record)
        if not fields:
            return line
        return line + "".join(f" {name}={_text(value)}" for name, value in fields.items())


def _text(value: Any) -> str:
    text = value if value.__class__ is str else str(value)
    if text and _QUOTED.search(text) is None:
        return text
    return json.dumps(text, ensure_ascii=False)


def worker_number() -> int | None:
    """This process's number among the workers uvicorn started (``--workers N``): 1, 2, ...
    in the order they started, a worker started in place of one that ended taking the next;
    None in a process no other started (a single process, or the one that starts workers)."""
    import multiprocessing

    if multiprocessing.parent_process() is None:
        return None
    identity = getattr(multiprocessing.current_process(), "_identity", ())
    return int(identity[-1]) if identity else None


#: The libraries' loggers ``configure_logging`` opened last, closed again by the next call.
_opened: list[str] = []


def configure_logging(
    log_format: str,
    log_level: str = "info",
    *,
    libraries: tuple[str, ...] = (),
    worker: int | None = None,
) -> None:
    """Log on stderr, as text lines or JSON lines (``log_format``), ratekeeper's and uvicorn's
    messages from ``log_level`` (one of ``LEVELS``) up, and other libraries' from warning (or
    ``log_level`` when higher), but those whose loggers ``libraries`` names (``("all",)``:
    every one), which follow ``log_level``. ``worker`` is the worker number each line names."""
    level = LEVELS[log_level]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(worker) if log_format == "json" else TextFormatter(worker))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if ALL in libraries else max(level, logging.WARNING))
    for name in _opened:
        logging.getLogger(name).setLevel(logging.NOTSET)
    _opened[:] = [name for name in libraries if name != ALL and name not in OWN]
    for name in (*OWN, *_opened):
        logging.getLogger(name).setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    uvicorn_access = logging.getLogger("uvicorn.access")  # ratekeeper's own says more
    uvicorn_access.handlers[:] = []
    uvicorn_access.propagate = False
    logging.getLogger(ACCESS).setLevel(logging.INFO)  # asked for, at any level
