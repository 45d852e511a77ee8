"""The decision service's live dashboard (``ratekeeper serve --dashboard``): a page that shows
the decisions per second, the keys being limited, latency, the stores' health and the rules,
and the same figures as JSON (``GET /v1/stats``, ``GET /v1/top``), behind the admin token.

``recorder`` records the decisions in bounded memory, ``shared`` adds up the records of the
worker processes, ``stats`` makes the figures, and ``routes`` serves them.
"""

from ratekeeper.service.dashboard.recorder import Recorder
from ratekeeper.service.dashboard.routes import Dashboard
from ratekeeper.service.dashboard.shared import SharedShots

__all__ = ["Dashboard", "Recorder", "SharedShots"]
