"""The reference's variables read as it reads them (Go's envconfig), and its refusals."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ratekeeper.service.compat.variables import VARIABLES

#: ``(logging level, message)`` lines for ``serve`` to log once logging is set up.
Notes = list[tuple[int, str]]


class Refused(ValueError):
    """A variable set to a value ratekeeper cannot honour; the message names it and says why."""


def refusal(variable: str, value: str, why: str | None = None) -> Refused:
    """The error of ``variable`` set to ``value``: not supported, because ``why`` (default:
    the variable's note)."""
    return Refused(
        f"${variable}={value}: not supported: {why or VARIABLES[variable].note} "
        "(docs/migrating.md says what ratekeeper reads)"
    )


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_UNIT = r"(?:ns|us|µs|μs|ms|s|m|h)"
_PART = re.compile(f"({_NUMBER})({_UNIT})")
_DURATION = re.compile(f"[-+]?(?:{_NUMBER}{_UNIT})+")
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


class Reader:
    """The variables of ``environ``: one that is not set has the reference's default; one set
    to an empty string is empty (as envconfig reads them)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ

    def text(self, name: str) -> str:
        return self.environ.get(name, VARIABLES[name].default)

    def given(self, name: str) -> bool:
        return name in self.environ

    def switch(self, name: str) -> bool:
        """A Go ``bool``: only ``strconv.ParseBool``'s spellings; ``Refused`` for others."""
        value = self.text(name)
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise Refused(f"${name}: expected true or false, not {value!r}")

    def port(self, name: str) -> int:
        value = self.text(name).strip()
        if not value.isascii() or not value.isdigit() or not 0 < int(value) < 65536:
            raise Refused(f"${name}: expected a port from 1 to 65535, not {value!r}")
        return int(value)

    def seconds(self, name: str) -> float:
        """A Go ``time.Duration`` (``500ms``, ``2s``, ``1m30s``; ``0``) in seconds;
        ``Refused`` for anything else, negative durations included."""
        value = self.text(name).strip()
        if value in ("0", "+0"):
            return 0.0
        if not _DURATION.fullmatch(value) or value.startswith("-"):
            raise Refused(f"${name}: expected a duration such as 500ms or 2s, not {value!r}")
        return sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(value))
