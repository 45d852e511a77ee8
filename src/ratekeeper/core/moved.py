"""Import paths that moved: each old module stays, re-exporting its names from their new home,
and warns once, when it is first imported, until the version that removes it.

An old module names its new home and calls ``moved`` after its imports::

    from ratekeeper.core.overrides import DEFAULT_ALGORITHM, FIELDS, Override
    from ratekeeper.core.moved import moved

    __all__ = ["DEFAULT_ALGORITHM", "FIELDS", "Override"]

    moved(__name__, "ratekeeper.core.overrides")

CHANGELOG.md lists every moved path, old and new.
"""

from __future__ import annotations

import warnings

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
