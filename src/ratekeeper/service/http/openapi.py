"""The OpenAPI 3.1 document of the decision service's HTTP API (``GET /openapi.json``).

Written by hand beside the routes it describes; a test holds it to the app's routes. The paths
are given by area (checks, admin, probes, Envoy's and nginx's); their bodies' schemas are
``ratekeeper.service.http.schemas``. A problem's status is the one
``ratekeeper.wire.problems.KINDS`` gives its kind, as the service answers it.
"""

from __future__ import annotations

from typing import Any

from ratekeeper.core.version import VERSION
from ratekeeper.service.http.bodies import MAX_BATCH
from ratekeeper.service.http.schemas import ref, schemas
from ratekeeper.wire.headers import DEGRADED
from ratekeeper.wire.problems import KINDS, MEDIA_TYPE


def document() -> dict[str, Any]:
    """The OpenAPI document."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "ratekeeper decision service", "version": VERSION},
        "paths": {
            **_checks(),
            **_admin(),
            **_dashboard(),
            **_probes(),
            **_gateways(),
            **_itself(),
        },
        "components": {
            "schemas": schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(name)}}}


def _problems(*described: tuple[str, str]) -> dict[str, Any]:
    """The answers of ``described``, (kind, description) pairs: each a problem, under the
    status of its kind."""
    return {
        str(KINDS[kind].status): {
            "description": description,
            "content": {MEDIA_TYPE: {"schema": ref("Problem")}},
        }
        for kind, description in described
    }


_RATE_HEADERS = {
    name: {"description": text, "schema": schema}
    for name, text, schema in (
        ("X-RateLimit-Limit", "the limit of the status closest to its limit", {"type": "integer"}),
        ("X-RateLimit-Remaining", "hits it still allows", {"type": "integer"}),
        (
            "X-RateLimit-Reset",
            "seconds until it is fully available again, rounded up",
            {"type": "integer"},
        ),
        (
            "Retry-After",
            "seconds until a refused hit could pass (on 429 only; at most a day)",
            {"type": "integer", "minimum": 0, "maximum": 86400},
        ),
        (
            DEGRADED,
            "'true' when the store's failure policy made a decision",
            {"enum": ["true"]},
        ),
        (
            "RateLimit-Policy",
            "with --ietf-headers: the IETF draft's policy of that status, '\"name\";q=10;w=60'",
            {"type": "string"},
        ),
        (
            "RateLimit",
            "with --ietf-headers: the IETF draft's state of that status, '\"name\";r=4;t=30'",
            {"type": "string"},
        ),
    )
}
#: The problems of a request with a JSON body.
_BAD = _problems(
    ("malformed", "the body is not JSON"),
    ("too-large", "the body is over 64 KiB"),
    ("media-type", "the body is said to be other than application/json"),
    ("invalid", "a value is not valid; pointer says where"),
    (
        "unavailable",
        "a store failed and no failure policy answers; or, of type "
        "urn:ratekeeper:problem:overloaded with Retry-After, --max-in-flight decisions are "
        "under way",
    ),
)
#: The problems of an admin endpoint.
_ADMIN = _problems(
    ("unauthorized", "no or a wrong bearer token"),
    ("not-found", "no such override, or the admin endpoints are off"),
    ("invalid", "a key, domain or prefix that is not valid"),
    ("unavailable", "the configuration store failed, or the service has none"),
)
_ADMIN["401"]["headers"] = {
    "WWW-Authenticate": {"schema": {"type": "string", "pattern": "^Bearer "}}
}
_SECURITY: list[dict[str, list[str]]] = [{"bearer": []}]

_KEY = {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}
_DOMAIN = {"name": "domain", "in": "query", "schema": {"type": "string", "default": ""}}


def _checks() -> dict[str, Any]:
    """``/v1/check``, ``/v1/check/batch`` and ``/v1/peek``."""
    result = {**_json(ref("Result"), "allowed"), "headers": _RATE_HEADERS}
    refused = {**_json(ref("Result"), "refused"), "headers": _RATE_HEADERS}
    return {
        "/v1/check": {
            "post": {
                "summary": "Count a hit and decide it",
                "requestBody": _body("Check"),
                "responses": {"200": result, "429": refused, **_BAD},
            }
        },
        "/v1/check/batch": {
            "post": {
                "summary": "Decide many checks, all parsed before any counts",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": MAX_BATCH,
                                "items": ref("Check"),
                            }
                        }
                    },
                },
                "responses": {"200": _json(ref("BatchResult"), "every result, in order"), **_BAD},
            }
        },
        "/v1/peek": {
            "post": {
                "summary": "A check's state, counting nothing",
                "requestBody": _body("Check"),
                "responses": {"200": result, **_BAD},
            }
        },
    }


def _admin() -> dict[str, Any]:
    """``/v1/reset`` and the overrides: behind the admin token."""
    return {
        "/v1/reset": {
            "post": {
                "summary": "Forget what a key's limit counted (admin: it gives the limit back)",
                "security": _SECURITY,
                "requestBody": _body("Reset"),
                "responses": {
                    "204": {"description": "forgotten"},
                    **_BAD,
                    "401": _ADMIN["401"],
                    **_problems(
                        ("not-found", "the admin endpoints are off: no admin token is set")
                    ),
                },
            }
        },
        "/v1/overrides": {
            "get": {
                "summary": "List overrides (at most 1000), by domain then key",
                "security": _SECURITY,
                "parameters": [
                    {"name": "domain", "in": "query", "schema": {"type": "string"}},
                    {"name": "prefix", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "overrides": {"type": "array", "items": ref("StoredOverride")},
                                "truncated": {"type": "boolean"},
                            },
                        },
                        "the overrides",
                    ),
                    **_ADMIN,
                },
            }
        },
        "/v1/overrides/{key}": {
            "parameters": [_KEY, _DOMAIN],
            "get": {
                "summary": "A key's override",
                "security": _SECURITY,
                "responses": {"200": _json(ref("StoredOverride"), "the override"), **_ADMIN},
            },
            "put": {
                "summary": "Set a key's override",
                "security": _SECURITY,
                "requestBody": _body("Override"),
                "responses": {"200": _json(ref("StoredOverride"), "stored"), **_ADMIN, **_BAD},
            },
            "delete": {
                "summary": "Remove a key's override",
                "security": _SECURITY,
                "responses": {"204": {"description": "removed"}, **_ADMIN},
            },
        },
    }


#: The answers of a dashboard route without the admin token, or with the dashboard off.
_LOOKING = _problems(
    ("unauthorized", "no or a wrong bearer token (or sign-in cookie)"),
    ("not-found", "the dashboard is off (serve --dashboard turns it on)"),
)
_HTML = {"text/html": {"schema": {"type": "string"}}}


def _dashboard() -> dict[str, Any]:
    """The dashboard (``serve --dashboard``): its page, and its figures as JSON."""
    window = {
        "name": "window",
        "in": "query",
        "schema": {"type": "integer", "minimum": 10, "maximum": 300, "default": 60},
    }
    n = {
        "name": "n",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
    }
    signed_in = {"303": {"description": "signed in: to /dashboard, with the sign-in cookie"}}
    form = {"description": "the sign-in form", "content": _HTML}
    return {
        "/v1/stats": {
            "get": {
                "summary": "Everything the dashboard shows",
                "security": _SECURITY,
                "responses": {"200": _json(ref("Stats"), "the figures"), **_LOOKING},
            }
        },
        "/v1/top": {
            "get": {
                "summary": "The keys of the most decisions and refusals over a window",
                "security": _SECURITY,
                "parameters": [window, n],
                "responses": {
                    "200": _json(ref("Top"), "the keys"),
                    **_LOOKING,
                    **_problems(("invalid", "a window or n out of its range")),
                },
            }
        },
        "/dashboard": {
            "get": {
                "summary": "The dashboard's page (with ?token=, sign in and come back)",
                "parameters": [{"name": "token", "in": "query", "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": "the page", "content": _HTML},
                    **signed_in,
                    "401": form,
                    "404": _LOOKING["404"],
                },
            }
        },
        "/dashboard/login": {
            "post": {
                "summary": "Sign in with the admin token (a form's token=)",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/x-www-form-urlencoded": {
                            "schema": {
                                "type": "object",
                                "properties": {"token": {"type": "string"}},
                                "required": ["token"],
                            }
                        }
                    },
                },
                "responses": {**signed_in, "401": form, "404": _LOOKING["404"]},
            }
        },
        "/dashboard/logout": {
            "post": {
                "summary": "Sign out: the cookie forgotten",
                "responses": {"303": {"description": "to /dashboard"}, "404": _LOOKING["404"]},
            }
        },
        "/dashboard/assets/{name}": {
            "get": {
                "summary": "The page's style sheet and script",
                "parameters": [
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        "schema": {"enum": ["dashboard.css", "dashboard.js"]},
                    }
                ],
                "responses": {"200": {"description": "the file"}, **_LOOKING},
            }
        },
    }


def _probes() -> dict[str, Any]:
    """``/healthz`` and ``/readyz``."""
    return {
        "/healthz": {
            "get": {"summary": "Liveness", "responses": {"200": _json({"type": "object"}, "alive")}}
        },
        "/readyz": {
            "get": {
                "summary": "Readiness: the request store answers (the configuration store is"
                " reported, and makes the status 'degraded' when it does not answer)",
                "responses": {
                    "200": _json({"type": "object"}, "ready"),
                    "503": _json({"type": "object"}, "the store does not answer"),
                },
            }
        },
    }


def _gateways() -> dict[str, Any]:
    """Envoy's ``/json`` and ``/healthcheck``, and nginx's ``/v1/nginx``."""
    return {
        "/json": {
            "post": {
                "summary": "Envoy's rate-limit service over HTTP",
                "requestBody": _body("EnvoyRequest"),
                "responses": {
                    "200": _json(ref("EnvoyResponse"), "OK"),
                    "429": _json(ref("EnvoyResponse"), "OVER_LIMIT"),
                    "400": {"description": "Bad Request", "content": {"text/plain": {}}},
                },
            }
        },
        "/healthcheck": {
            "get": {
                "summary": "Envoy's service's health check",
                "responses": {"200": {"description": "OK", "content": {"text/plain": {}}}},
            }
        },
        "/v1/nginx": {
            "get": {
                "summary": "nginx's auth_request: 200 lets the request through, 403 refuses it",
                "description": (
                    "nginx describes the request in headers: X-RateLimit-Domain, X-Real-IP "
                    "(required), X-User, X-Original-URI and X-Original-Method. The answer has no "
                    "body; it carries X-RateLimit-Limit, X-RateLimit-Remaining, "
                    "X-RateLimit-Reset, and Retry-After on a refusal. Only 200 and 403 are ever "
                    "sent, as nginx turns any other status into a 500."
                ),
                "parameters": [
                    {
                        "name": name,
                        "in": "header",
                        "required": name == "X-Real-IP",
                        "schema": {"type": "string", "minLength": int(name == "X-Real-IP")},
                    }
                    for name in (
                        "X-RateLimit-Domain",
                        "X-Real-IP",
                        "X-User",
                        "X-Original-URI",
                        "X-Original-Method",
                    )
                ],
                "responses": {
                    "200": {"description": "let the request through"},
                    "403": {"description": "over a limit, or a request nginx could not describe"},
                },
            }
        },
    }


def _itself() -> dict[str, Any]:
    """``/openapi.json``."""
    return {
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": _json({"type": "object"}, "it")},
            }
        },
    }
