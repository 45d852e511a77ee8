"""The decision service's log: ratekeeper's and uvicorn's messages on stderr, at one level.

``configure_logging(log_format, log_level)`` sends every record to stderr, as text lines or as
JSON lines (``--log-format``), from ``log_level`` up (``--log-level``: debug, info, warning or
error): the root logger and uvicorn's follow it. uvicorn's own access log stays off: the
service's (``ratekeeper.service.access``, ``--access-log``) says more, and is not bound by the
level: asked for, it is logged at any level.

Fields passed with ``extra=`` go with the record: in JSON as fields of their own, beside
``time``, ``level``, ``logger``, ``pid`` and ``message`` (and ``error``, a traceback); in text
as ``name=value`` after the message. So a warning about a decision can carry its ``domain``
and ``rule``, and the access log its fields.
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

#: The logger of the access log (``ratekeeper.service.access``).
ACCESS = "ratekeeper.access"

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
    ``message``, the ``extra=`` fields, and ``error`` with the traceback if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        for name, value in extra_fields(record).items():
            entry.setdefault(name, value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message name=value …``, the ``extra=`` fields after the message
    (a value with a space or a quote in it quoted, as JSON)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

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


def configure_logging(log_format: str, log_level: str = "info") -> None:
    """Log ratekeeper's and uvicorn's messages on stderr, as text lines or JSON lines
    (``log_format``), from ``log_level`` (one of ``LEVELS``) up."""
    level = LEVELS[log_level]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).setLevel(level)
        logging.getLogger(name).propagate = True
    uvicorn_access = logging.getLogger("uvicorn.access")  # ratekeeper's own says more
    uvicorn_access.handlers[:] = []
    uvicorn_access.propagate = False
    logging.getLogger(ACCESS).setLevel(logging.INFO)  # asked for, at any level
