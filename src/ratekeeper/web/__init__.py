"""ratekeeper on the web: what every HTTP surface shares (rate-limit headers, problem details)
and the integrations with web applications, free of any web framework.

``RateLimit`` names a limit and the ``keys`` of a request it counts against; a ``Gate`` (or
``AsyncGate``) decides a ``Request`` into a ``GateDecision``; a limit charged by outcome is
settled by the ``HandlerResult`` its handler came to. The adapters translate:
``ratekeeper.web.asgi`` and ``ratekeeper.web.wsgi`` (middleware for any application), and
``ratekeeper.web.fastapi``, ``ratekeeper.web.flask`` and ``ratekeeper.web.django`` (per-route,
router-wide and app-wide limits), each of which imports its framework and is the extra of that
name.
"""

from typing import Any

from ratekeeper.core.moved import renamed
from ratekeeper.web import keys
from ratekeeper.web.gate import AsyncGate, Gate
from ratekeeper.web.keys import Key
from ratekeeper.web.limits import RateLimit
from ratekeeper.web.outcomes import GateDecision, HandlerResult
from ratekeeper.web.replies import Replies, Reply
from ratekeeper.web.request import Request

__all__ = [
    "AsyncGate",
    "Gate",
    "GateDecision",
    "HandlerResult",
    "Key",
    "RateLimit",
    "Replies",
    "Reply",
    "Request",
    "keys",
]

#: The old names of names here, found with a ``DeprecationWarning`` until 0.3.0.
_RENAMED = {"Outcome": "GateDecision", "Result": "HandlerResult"}


def __getattr__(name: str) -> Any:
    """An old name (``Outcome``, ``Result``): its new one's object, with a warning."""
    return renamed(__name__, name, _RENAMED, globals())
