"""Import paths that moved: each old module stays, re-exporting its names from their new home,
and warns once, when it is first imported, until the version that removes it.

An old module names its new home and calls ``moved`` after its imports::

    from ratekeeper.core.overrides import DEFAULT_ALGORITHM, FIELDS, Override
    from ratekeeper.core.moved import moved

    __all__ = ["DEFAULT_ALGORITHM", "FIELDS", "Override"]

    moved(__name__, "ratekeeper.core.overrides")

A name given a new one in its module keeps the old one as an alias: the module's
``__getattr__`` finds it through ``renamed`` and warns each time it is used::

    _RENAMED = {"Outcome": "GateDecision"}

    def __getattr__(name: str) -> Any:
        return renamed(__name__, name, _RENAMED, globals())

A keyword argument given a new name still takes its old one, with a warning, through
``keywords_renamed``; an attribute, through a property that calls ``deprecated_name``.

CHANGELOG.md lists every moved path and every renamed name, old and new.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

#: The version whose release drops every old path.
REMOVED_IN = "0.3.0"


def message(old: str, new: str) -> str:
    """What importing the module at ``old`` warns:
    ``"ratekeeper.overrides is deprecated and will be removed in 0.3.0: import from
    ratekeeper.core.overrides"``."""
    return f"{old} is deprecated and will be removed in {REMOVED_IN}: import from {new}"


def moved(old: str, new: str) -> None:
    """Warn, from the module at ``old`` as it is imported, that its names import from ``new``.

    The ``DeprecationWarning`` points at the line that imported ``old`` (import machinery is
    skipped), so Python's default filters show it when that line is in ``__main__``, and test
    runners show it for code under test.
    """
    # 1: this function; 2: the old module's body; 3: whatever imported it.
    warnings.warn(message(old, new), DeprecationWarning, stacklevel=3)


def renamed_message(old: str, new: str) -> str:
    """What using the old name ``old`` warns: ``"ratekeeper.web.Outcome is deprecated and
    will be removed in 0.3.0: use ratekeeper.web.GateDecision"``."""
    return f"{old} is deprecated and will be removed in {REMOVED_IN}: use {new}"


def deprecated_name(old: str, new: str, stacklevel: int = 2) -> None:
    """Warn that the name ``old`` (a name, keyword or command) is ``new`` now, from the code
    that used it: ``stacklevel`` as ``warnings.warn`` counts it, from the caller's frame (2:
    the caller of the function that calls this one)."""
    warnings.warn(renamed_message(old, new), DeprecationWarning, stacklevel=stacklevel + 1)


def renamed(module: str, name: str, names: Mapping[str, str], found: Mapping[str, Any]) -> Any:
    """For the ``__getattr__`` of the module named ``module``, whose globals are ``found``:
    the object of the new name of ``name`` when ``names`` maps it (an old name), with a
    ``DeprecationWarning`` at the line that used it; else ``AttributeError``."""
    new = names.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    # 1: this function; 2: the module's __getattr__; 3: the line that used the old name.
    warnings.warn(
        renamed_message(f"{module}.{name}", f"{module}.{new}"), DeprecationWarning, stacklevel=3
    )
    return found[new]


def keywords_renamed(where: str, names: Mapping[str, str]) -> Callable[[F], F]:
    """Decorate the function ``where`` names so that it takes each old keyword of ``names``
    for its new one, with a ``DeprecationWarning`` at the call; both at once is a
    ``TypeError``. Type checkers see only the new keywords."""

    def renaming(kwargs: dict[str, Any]) -> None:
        for old, new in names.items():
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{where}() takes {new}= or {old}=, not both")
                # 1: deprecated_name; 2: this function; 3: the wrapper; 4: its caller.
                deprecated_name(f"{where}({old}=...)", f"{where}({new}=...)", stacklevel=3)
                kwargs[new] = kwargs.pop(old)

    def decorate(function: F) -> F:
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def call_async(*args: Any, **kwargs: Any) -> Any:
                renaming(kwargs)
                return await function(*args, **kwargs)

            return cast(F, call_async)

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            renaming(kwargs)
            return function(*args, **kwargs)

        return cast(F, call)

    return decorate
