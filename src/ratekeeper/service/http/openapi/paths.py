"""The paths of the OpenAPI document but the dashboard's, by area: the checks, the admin
endpoints, the probes, Envoy's and nginx's, and the document itself."""

from __future__ import annotations

from typing import Any

from ratekeeper.service.http.bodies import MAX_BATCH
from ratekeeper.service.http.openapi.shared import (
    SECURITY,
    json_answer,
    json_body,
    problems,
    ref,
)
from ratekeeper.wire.headers import DEGRADED

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
_BAD = problems(
    ("malformed", "the body is not JSON"),
    ("too-large", "the body is over 64 KiB"),
    ("media-type", "the body is said to be other than application/json"),
    ("invalid", "a value is not valid; pointer says where"),
    (
        "unavailable",
        "a store failed and no failure policy answers; or, of type "
        "urn:ratekeeper:problem:overloaded with Retry-After, --max-in-flight decisions are "
        "under way, or requests wait longer than --max-wait and this one was shed",
    ),
)

#: The problems of an admin endpoint.
_ADMIN = problems(
    ("unauthorized", "no or a wrong bearer token"),
    ("not-found", "no such override, or the admin endpoints are off"),
    ("invalid", "a key, domain or prefix that is not valid"),
    ("unavailable", "the configuration store failed, or the service has none"),
)

_ADMIN["401"]["headers"] = {
    "WWW-Authenticate": {"schema": {"type": "string", "pattern": "^Bearer "}}
}
_KEY = {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}
_DOMAIN = {"name": "domain", "in": "query", "schema": {"type": "string", "default": ""}}


def checks() -> dict[str, Any]:
    """``/v1/check``, ``/v1/check/batch`` and ``/v1/peek``."""
    result = {**json_answer(ref("Result"), "allowed"), "headers": _RATE_HEADERS}
    refused = {**json_answer(ref("Result"), "refused"), "headers": _RATE_HEADERS}
    return {
        "/v1/check": {
            "post": {
                "summary": "Count a hit and decide it",
                "requestBody": json_body("Check"),
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
                "responses": {
                    "200": json_answer(ref("BatchResult"), "every result, in order"),
                    **_BAD,
                },
            }
        },
        "/v1/peek": {
            "post": {
                "summary": "A check's state, counting nothing",
                "requestBody": json_body("Check"),
                "responses": {"200": result, **_BAD},
            }
        },
    }


def admin() -> dict[str, Any]:
    """``/v1/reset`` and the overrides: behind the admin token."""
    return {
        "/v1/reset": {
            "post": {
                "summary": "Forget what a key's limit counted (admin: it gives the limit back)",
                "security": SECURITY,
                "requestBody": json_body("Reset"),
                "responses": {
                    "204": {"description": "forgotten"},
                    **_BAD,
                    "401": _ADMIN["401"],
                    **problems(("not-found", "the admin endpoints are off: no admin token is set")),
                },
            }
        },
        "/v1/overrides": {
            "get": {
                "summary": "List overrides (at most 1000), by domain then key",
                "security": SECURITY,
                "parameters": [
                    {"name": "domain", "in": "query", "schema": {"type": "string"}},
                    {"name": "prefix", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": json_answer(
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
                "security": SECURITY,
                "responses": {"200": json_answer(ref("StoredOverride"), "the override"), **_ADMIN},
            },
            "put": {
                "summary": "Set a key's override",
                "security": SECURITY,
                "requestBody": json_body("Override"),
                "responses": {
                    "200": json_answer(ref("StoredOverride"), "stored"),
                    **_ADMIN,
                    **_BAD,
                },
            },
            "delete": {
                "summary": "Remove a key's override",
                "security": SECURITY,
                "responses": {"204": {"description": "removed"}, **_ADMIN},
            },
        },
    }


def probes() -> dict[str, Any]:
    """``/healthz`` and ``/readyz``."""
    return {
        "/healthz": {
            "get": {
                "summary": "Liveness",
                "responses": {"200": json_answer({"type": "object"}, "alive")},
            }
        },
        "/readyz": {
            "get": {
                "summary": "Readiness: the request store answers (the configuration store is"
                " reported, and makes the status 'degraded' when it does not answer)",
                "responses": {
                    "200": json_answer({"type": "object"}, "ready"),
                    "503": json_answer({"type": "object"}, "the store does not answer"),
                },
            }
        },
    }


def gateways() -> dict[str, Any]:
    """Envoy's ``/json`` and ``/healthcheck``, and nginx's ``/v1/nginx``."""
    return {
        "/json": {
            "post": {
                "summary": "Envoy's rate-limit service over HTTP",
                "requestBody": json_body("EnvoyRequest"),
                "responses": {
                    "200": json_answer(ref("EnvoyResponse"), "OK"),
                    "429": json_answer(ref("EnvoyResponse"), "OVER_LIMIT"),
                    "400": {"description": "Bad Request", "content": {"text/plain": {}}},
                },
            }
        },
        "/healthcheck": {
            "get": {
                "summary": "Envoy's service's health check",
                "responses": {
                    "200": {"description": "OK", "content": {"text/plain": {}}},
                    "500": {
                        "description": (
                            "unhealthy, with an empty body: with --healthcheck-rules while no "
                            "rule is loaded, with --healthcheck-store while the store does not "
                            "answer"
                        )
                    },
                },
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


def itself() -> dict[str, Any]:
    """``/openapi.json``."""
    return {
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": json_answer({"type": "object"}, "it")},
            }
        },
    }
