"""The decision service's HTTP door: ratekeeper's JSON API, Envoy's ``POST /json`` and nginx's
``auth_request``, the probes and the OpenAPI document, as one Starlette app over the engine
(``http_app``).

``app`` assembles the app; ``checks`` (the decisions), ``admin`` and ``health`` handle its
routes, over ``reading`` (bodies in), ``bodies`` and ``hot`` (ratekeeper's JSON, by the long
and the short way), ``envoy_json`` and ``nginx`` (the gateways' shapes) and ``responses``
(answers out); ``openapi`` describes it, by part. What runs beside it (gRPC, the
dashboard, the engine from startup to shutdown) is wired by ``ratekeeper.service.runtime``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ratekeeper.core.moved import moved
from ratekeeper.service.http.app import MAX_BODY, http_app

__all__ = ["MAX_BODY", "http_app"]


def __getattr__(name: str) -> Any:
    """``create_app``, the service's app with gRPC and the dashboard wired beside this one, is
    the runtime's now: found there, by name (the door imports nothing above it), with a
    ``DeprecationWarning``, until the version ``ratekeeper.core.moved`` names."""
    if name != "create_app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    moved(f"{__name__}.create_app", "ratekeeper.service.runtime.app.create_app")
    create_app: Callable[..., Any] = importlib.import_module(
        "ratekeeper.service.runtime.app"
    ).create_app
    globals()["create_app"] = create_app  # found here from now on: it warns once
    return create_app
