"""The Python API over a request store: ``Limiter`` and its asyncio twin ``AsyncLimiter``.

``limiters`` holds the twins, side by side; ``decorators`` the functions their ``limit``
decorators return, twins too; ``shared`` what they share free of I/O.
"""

from ratekeeper.limiter.limiters import AsyncLimiter, Limiter
from ratekeeper.limiter.shared import POLL, RATES, HitLike, KeyLike, LimitLike

__all__ = ["POLL", "RATES", "AsyncLimiter", "HitLike", "KeyLike", "LimitLike", "Limiter"]
