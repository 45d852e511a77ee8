"""Moved to ``ratekeeper.service.runtime.app`` (the app built from the settings) and
``ratekeeper.service.runtime.serve`` (``serve``, ``uvicorn_options``, ``GRACE``). This path
warns, and is removed in 0.3.0."""

from ratekeeper.core.moved import moved
from ratekeeper.service.runtime.app import (
    Parts,
    build_app,
    build_engine,
    build_parts,
    envoy_header_names,
    from_environment,
    require_server_extra,
    run_config,
)
from ratekeeper.service.runtime.serve import GRACE, serve, uvicorn_options

__all__ = [
    "GRACE",
    "Parts",
    "build_app",
    "build_engine",
    "build_parts",
    "envoy_header_names",
    "from_environment",
    "require_server_extra",
    "run_config",
    "serve",
    "uvicorn_options",
]

moved(__name__, "ratekeeper.service.runtime.app and ratekeeper.service.runtime.serve")
