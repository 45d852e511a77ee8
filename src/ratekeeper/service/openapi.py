"""The OpenAPI 3.1 document of the decision service's HTTP API (``GET /openapi.json``).

Written by hand beside the routes it describes; a test holds it to the app's routes.
"""

from __future__ import annotations

from typing import Any

from ratekeeper import __version__


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": _ref("Problem")}},
    }


_RATE_HEADERS = {
    name: {
        "description": text,
        "schema": {"type": "integer" if name != "X-RateLimit-Degraded" else "string"},
    }
    for name, text in {
        "X-RateLimit-Limit": "the limit of the status closest to its limit",
        "X-RateLimit-Remaining": "hits it still allows",
        "X-RateLimit-Reset": "seconds until it is fully available again",
        "Retry-After": "seconds until a refused hit could pass (on 429 only; at most a day)",
        "X-RateLimit-Degraded": "'true' when the store's failure policy made a decision",
    }.items()
}

_BAD = {
    "400": _problem("the body is not JSON"),
    "413": _problem("the body is over 64 KiB"),
    "422": _problem("a value is not valid; pointer says where"),
    "503": _problem("a store failed and no failure policy answers"),
}

_ADMIN = {
    "401": _problem("no or a wrong bearer token"),
    "404": _problem("no such override, or the admin endpoints are off"),
}

_KEY = {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}
_DOMAIN = {"name": "domain", "in": "query", "schema": {"type": "string", "default": ""}}

_SCHEMAS: dict[str, Any] = {
    "KeyCheck": {
        "type": "object",
        "required": ["key"],
        "additionalProperties": False,
        "properties": {
            "key": {"type": "string", "minLength": 1},
            "limit": {
                "oneOf": [
                    {"type": "string", "examples": ["10/minute"]},
                    _ref("Override"),
                ],
                "description": "counts the key under this limit; without it, under the key's "
                "override or the default",
            },
            "cost": {"type": "integer", "minimum": 0, "default": 1},
        },
    },
    "DescriptorCheck": {
        "type": "object",
        "required": ["domain", "descriptors"],
        "additionalProperties": False,
        "properties": {
            "domain": {"type": "string", "minLength": 1},
            "descriptors": {"type": "array", "minItems": 1, "items": _ref("Descriptor")},
            "hits_addend": {
                "type": "integer",
                "minimum": 0,
                "default": 0,
                "description": "0 means 1",
            },
        },
    },
    "Descriptor": {
        "type": "object",
        "required": ["entries"],
        "additionalProperties": False,
        "properties": {
            "entries": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["key"],
                    "properties": {"key": {"type": "string"}, "value": {"type": "string"}},
                },
            },
            "limit": {
                "type": "object",
                "required": ["requests_per_unit", "unit"],
                "properties": {
                    "requests_per_unit": {"type": "integer", "minimum": 0},
                    "unit": {"enum": ["SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "YEAR"]},
                },
            },
            "hits_addend": {"type": "integer", "minimum": 0, "description": "0 only looks"},
        },
    },
    "Check": {"oneOf": [_ref("KeyCheck"), _ref("DescriptorCheck")]},
    "Reset": {
        "type": "object",
        "required": ["key"],
        "properties": {
            "key": {"type": "string"},
            "limit": {"oneOf": [{"type": "string"}, _ref("Override")]},
        },
    },
    "Status": {
        "type": "object",
        "properties": {
            "code": {"enum": ["OK", "OVER_LIMIT"]},
            "limit": {"type": ["integer", "null"]},
            "remaining": {"type": "integer"},
            "reset_after": {"type": ["number", "null"]},
            "retry_after": {"type": ["number", "null"], "description": "null: never"},
            "current_limit": {
                "type": ["object", "null"],
                "properties": {
                    "requests_per_unit": {"type": "integer"},
                    "unit": {"type": "string"},
                    "name": {"type": ["string", "null"]},
                },
            },
        },
    },
    "Result": {
        "type": "object",
        "properties": {
            "allowed": {"type": "boolean"},
            "code": {"enum": ["OK", "OVER_LIMIT"]},
            "degraded": {"type": "boolean"},
            "statuses": {"type": "array", "items": _ref("Status")},
        },
    },
    "BatchResult": {
        "type": "object",
        "properties": {
            "allowed": {"type": "boolean"},
            "results": {"type": "array", "items": _ref("Result")},
        },
    },
    "Override": {
        "type": "object",
        "required": ["capacity", "time_window_sec"],
        "additionalProperties": False,
        "properties": {
            "capacity": {"type": "integer", "minimum": 0},
            "time_window_sec": {"type": ["number", "string"]},
            "algorithm": {"type": "string", "default": "bucketed_window"},
            "granularity": {"type": "number"},
            "burst": {"type": "integer"},
        },
    },
    "StoredOverride": {
        "type": "object",
        "properties": {
            "domain": {"type": "string"},
            "key": {"type": "string"},
            "override": _ref("Override"),
        },
    },
    "Problem": {
        "type": "object",
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "pointer": {"type": "string", "description": "a JSON Pointer to the part at fault"},
        },
    },
    "EnvoyRequest": {
        "type": "object",
        "description": "envoy.service.ratelimit.v3.RateLimitRequest in protobuf's JSON",
    },
    "EnvoyResponse": {
        "type": "object",
        "description": "envoy.service.ratelimit.v3.RateLimitResponse in protobuf's JSON",
    },
}


def _body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(name)}}}


def document() -> dict[str, Any]:
    """The OpenAPI document."""
    result = _json(_ref("Result"), "allowed")
    refused = {**_json(_ref("Result"), "refused"), "headers": _RATE_HEADERS}
    result["headers"] = _RATE_HEADERS
    admin: list[dict[str, list[str]]] = [{"bearer": []}]
    paths: dict[str, Any] = {
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
                        "application/json": {"schema": {"type": "array", "items": _ref("Check")}}
                    },
                },
                "responses": {"200": _json(_ref("BatchResult"), "every result, in order"), **_BAD},
            }
        },
        "/v1/peek": {
            "post": {
                "summary": "A check's state, counting nothing",
                "requestBody": _body("Check"),
                "responses": {"200": result, **_BAD},
            }
        },
        "/v1/reset": {
            "post": {
                "summary": "Forget what a key's limit counted",
                "requestBody": _body("Reset"),
                "responses": {"204": {"description": "forgotten"}, **_BAD},
            }
        },
        "/v1/overrides": {
            "get": {
                "summary": "List overrides (at most 1000), by domain then key",
                "security": admin,
                "parameters": [
                    {"name": "domain", "in": "query", "schema": {"type": "string"}},
                    {"name": "prefix", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "overrides": {"type": "array", "items": _ref("StoredOverride")},
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
                "security": admin,
                "responses": {"200": _json(_ref("StoredOverride"), "the override"), **_ADMIN},
            },
            "put": {
                "summary": "Set a key's override",
                "security": admin,
                "requestBody": _body("Override"),
                "responses": {"200": _json(_ref("StoredOverride"), "stored"), **_ADMIN, **_BAD},
            },
            "delete": {
                "summary": "Remove a key's override",
                "security": admin,
                "responses": {"204": {"description": "removed"}, **_ADMIN},
            },
        },
        "/healthz": {
            "get": {"summary": "Liveness", "responses": {"200": _json({"type": "object"}, "alive")}}
        },
        "/readyz": {
            "get": {
                "summary": "Readiness: the request store answers",
                "responses": {
                    "200": _json({"type": "object"}, "ready"),
                    "503": _json({"type": "object"}, "the store does not answer"),
                },
            }
        },
        "/json": {
            "post": {
                "summary": "Envoy's rate-limit service over HTTP",
                "requestBody": _body("EnvoyRequest"),
                "responses": {
                    "200": _json(_ref("EnvoyResponse"), "OK"),
                    "429": _json(_ref("EnvoyResponse"), "OVER_LIMIT"),
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
                "responses": {
                    "200": {"description": "let the request through"},
                    "403": {"description": "over a limit, or a request nginx could not describe"},
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": _json({"type": "object"}, "it")},
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "ratekeeper decision service", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
