"""The OpenAPI 3.1 document of the decision service's HTTP API (``GET /openapi.json``).

Written by hand beside the routes it describes; a test holds it to the app's routes. It is
given by part: the paths by area (``paths``: the checks, the admin endpoints, the probes,
Envoy's and nginx's; ``dashboard``: the dashboard's), and the schemas of their bodies
(``schemas``). A problem's status is the one ``ratekeeper.wire.problems.KINDS`` gives its
kind, as the service answers it.
"""

from __future__ import annotations

from typing import Any

from ratekeeper.core.version import VERSION
from ratekeeper.service.http.openapi import dashboard, paths
from ratekeeper.service.http.openapi.schemas import schemas


def document() -> dict[str, Any]:
    """The OpenAPI document."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "ratekeeper decision service", "version": VERSION},
        "paths": {
            **paths.checks(),
            **paths.admin(),
            **dashboard.paths(),
            **paths.probes(),
            **paths.gateways(),
            **paths.itself(),
        },
        "components": {
            "schemas": schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
