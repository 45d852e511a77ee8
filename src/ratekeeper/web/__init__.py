"""ratekeeper on the web: what every HTTP surface shares (rate-limit headers, problem details)
and the integrations with web applications, free of any web framework.

``RateLimit`` names a limit and the ``keys`` of a request it counts against; a ``Gate`` (or
``AsyncGate``) decides a ``Request`` into an ``Outcome``. The adapters translate:
``ratekeeper.web.asgi`` and ``ratekeeper.web.wsgi`` (middleware for any application), and
``ratekeeper.web.fastapi``, ``ratekeeper.web.flask`` and ``ratekeeper.web.django`` (per-route,
router-wide and app-wide limits), each of which imports its framework and is the extra of that
name.
"""

from ratekeeper.web import keys
from ratekeeper.web.gate import AsyncGate, Gate
from ratekeeper.web.keys import Key
from ratekeeper.web.limits import RateLimit
from ratekeeper.web.outcomes import Outcome, Result
from ratekeeper.web.replies import Replies, Reply
from ratekeeper.web.request import Request

__all__ = [
    "AsyncGate",
    "Gate",
    "Key",
    "Outcome",
    "RateLimit",
    "Replies",
    "Reply",
    "Request",
    "Result",
    "keys",
]
