"""Moved to ``ratekeeper.service.runtime.pyvoy_app``, and ``App`` to ``ratekeeper.service.asgi``;
this path warns, and is removed in 0.3.0. Its ``app`` is the new module's, built when first
read."""

from typing import Any

from ratekeeper.core.moved import moved
from ratekeeper.service.asgi import App
from ratekeeper.service.runtime import pyvoy_app as _home
from ratekeeper.service.runtime.pyvoy_app import build, grpc_or_http, is_grpc

__all__ = ["App", "build", "grpc_or_http", "is_grpc"]

moved(__name__, "ratekeeper.service.runtime.pyvoy_app and ratekeeper.service.asgi")


def __getattr__(name: str) -> Any:
    """``app``, as pyvoy imports it: the new module's."""
    return getattr(_home, name)
