"""envoyproxy/ratelimit's settings read under ``--compat`` (``ratekeeper.service.compat``), for
``Settings.read``: the mode, the raw values the reference's variables give, and the lines to log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ratekeeper.service.runtime.values import PARSERS

#: The configuration store of ``--compat envoy-ratelimit`` when none is given.
IN_MEMORY_CONFIG = "sqlite://:memory:"


def read_compat(
    given: Mapping[str, Any], env: Mapping[str, str], values: dict[str, Any], errors: list[str]
) -> dict[str, tuple[Any, str]]:
    """The raw values envoyproxy/ratelimit's settings give, with their sources, when
    ``--compat`` reads them (``service.compat``); their errors are added to ``errors``, and
    the mode and the lines to log to ``values``."""
    from ratekeeper.service import compat

    rules_given = given.get("rules") is not None or "RATEKEEPER_RULES" in env
    try:
        mode, why = compat.mode(given.get("compat"), env, rules_given)
    except ValueError as error:
        where = (
            "--compat" if given.get("compat") is not None else "--compat (from $RATEKEEPER_COMPAT)"
        )
        errors.append(f"{where}: {error}")
        return {}
    values["compat"] = mode
    if mode == compat.NONE:
        unread = None if why or "RUNTIME_ROOT" in env else compat.unread(env)
        if unread is not None:
            values["notes"] = ((logging.WARNING, unread),)
        return {}
    named = {
        name
        for name in PARSERS
        if given.get(name) is not None or "RATEKEEPER_" + name.upper() in env
    }
    translation = compat.translate(env, named)
    errors.extend(translation.errors)
    if "config" not in named:  # the reference keeps no overrides: write no file unasked
        # said by the service's own "configuration store:" line, once
        translation.values["config"] = (IN_MEMORY_CONFIG, f"--compat {mode}")
    level = logging.INFO if why.startswith(("--", "$")) else logging.WARNING
    values["notes"] = (
        (
            level,
            f"reading envoyproxy/ratelimit's variables and runtime directory ({why}); "
            "the flags and RATEKEEPER_* variables win over them",
        ),
        *translation.notes,
    )
    return translation.values
