"""The OpenAPI 3.1 document of the decision service's HTTP API (``GET /openapi.json``).

Written by hand beside the routes it describes; a test holds it to the app's routes.
"""

from __future__ import annotations

from typing import Any

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.inputs import MAX_COST
from ratekeeper.core.version import VERSION
from ratekeeper.rules.model import UNITS
from ratekeeper.service.bodies import MAX_BATCH
from ratekeeper.service.envoy_json import camel


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
    name: {"description": text, "schema": schema}
    for name, text, schema in (
        ("X-RateLimit-Limit", "the limit of the status closest to its limit", {"type": "integer"}),
        ("X-RateLimit-Remaining", "hits it still allows", {"type": "integer"}),
        ("X-RateLimit-Reset", "seconds until it is fully available again", {"type": "integer"}),
        (
            "Retry-After",
            "seconds until a refused hit could pass (on 429 only; at most a day)",
            {"type": "integer", "minimum": 0, "maximum": 86400},
        ),
        (
            "X-RateLimit-Degraded",
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
_ADMIN = {
    "401": {
        **_problem("no or a wrong bearer token"),
        "headers": {"WWW-Authenticate": {"schema": {"type": "string", "pattern": "^Bearer "}}},
    },
    "404": _problem("no such override, or the admin endpoints are off"),
    "422": _problem("a key, domain or prefix that is not valid"),
    "503": _problem("the configuration store failed, or the service has none"),
}

_BAD = {
    "400": _problem("the body is not JSON"),
    "413": _problem("the body is over 64 KiB"),
    "415": _problem("the body is said to be other than application/json"),
    "422": _problem("a value is not valid; pointer says where"),
    "503": _problem("a store failed and no failure policy answers"),
}

_KEY = {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}
_DOMAIN = {"name": "domain", "in": "query", "schema": {"type": "string", "default": ""}}

#: The largest cost, count or amount: ``ratekeeper.core.inputs.MAX_COST``.
_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_COST}
_AMOUNT = {"type": "integer", "minimum": 1, "maximum": MAX_COST}
_KEY_TEXT = {"type": "string", "minLength": 1}
_UNIT = {
    "enum": [name for unit in UNITS for name in (unit.upper(), unit)],
    "description": "an Envoy unit, in upper or lower case",
}
_LIMIT = {
    "oneOf": [
        {
            "type": "string",
            "minLength": 1,
            "examples": ["10/minute", "100 per hour", "5/30s"],
            "description": "one rate string",
        },
        _ref("Override"),
        {"type": "null"},
    ],
    "description": "counts the key under this limit; without it (or null), under the key's "
    "override or the default",
}

#: A uint64 in protobuf's JSON: a number, or its decimal digits in a string; null is 0.
_UINT = {
    "oneOf": [
        {"type": "integer", "minimum": 0, "maximum": MAX_COST},
        {"type": "string", "pattern": "^[0-9]{1,15}$"},
        {"type": "null"},
    ]
}


def _both(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A protobuf field under its two JSON names: snake_case and lowerCamelCase."""
    return {name: schema, camel(name): schema}


def _once(name: str) -> dict[str, Any]:
    """The field ``name`` under one of its two JSON names, not both."""
    return {"not": {"required": [name, camel(name)]}}


_SCHEMAS: dict[str, Any] = {
    "KeyCheck": {
        "type": "object",
        "required": ["key"],
        "additionalProperties": False,
        "properties": {
            "key": _KEY_TEXT,
            "limit": _LIMIT,
            "cost": {**_COUNT, "default": 1, "description": "0 only looks"},
        },
    },
    "DescriptorCheck": {
        "type": "object",
        "required": ["domain", "descriptors"],
        "additionalProperties": False,
        "properties": {
            "domain": _KEY_TEXT,
            "descriptors": {"type": "array", "minItems": 1, "items": _ref("Descriptor")},
            "hits_addend": {**_COUNT, "default": 0, "description": "0 means 1"},
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
                    "additionalProperties": False,
                    "properties": {
                        "key": _KEY_TEXT,
                        "value": {"type": "string", "default": ""},
                    },
                },
            },
            "limit": {
                "type": ["object", "null"],
                "required": ["requests_per_unit", "unit"],
                "additionalProperties": False,
                "properties": {
                    "requests_per_unit": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": MAX_COST,
                        "description": "0 is always over the limit, as in Envoy's service",
                    },
                    "unit": _UNIT,
                },
            },
            "hits_addend": {
                "type": ["integer", "null"],
                "minimum": 0,
                "maximum": MAX_COST,
                "description": "this descriptor's cost, instead of the request's; 0 only looks",
            },
        },
    },
    "Check": {"oneOf": [_ref("KeyCheck"), _ref("DescriptorCheck")]},
    "Reset": {
        "type": "object",
        "required": ["key"],
        "additionalProperties": False,
        "properties": {"key": _KEY_TEXT, "limit": _LIMIT},
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
        "description": "a limit; a window, granularity and burst that do not fit together, or "
        "a period string that is not one, are answered 422",
        "properties": {
            "capacity": _AMOUNT,
            "time_window_sec": {
                "oneOf": [
                    {"type": "number", "minimum": 0.001, "maximum": 3.1536e9},
                    {"type": "string", "minLength": 1, "examples": ["5m", "1 hour"]},
                ],
            },
            "algorithm": {
                "enum": [algorithm.value for algorithm in Algorithm],
                "default": "bucketed_window",
            },
            "granularity": {"type": ["number", "null"], "exclusiveMinimum": 0},
            "burst": {**_AMOUNT, "type": ["integer", "null"]},
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
        "required": ["type", "title", "status", "detail"],
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
        "description": "envoy.service.ratelimit.v3.RateLimitRequest in protobuf's JSON: names "
        "in snake_case or lowerCamelCase, 64-bit integers possibly quoted, null for a default",
        "required": ["domain", "descriptors"],
        "additionalProperties": False,
        **_once("hits_addend"),
        "properties": {
            "domain": _KEY_TEXT,
            "descriptors": {"type": "array", "minItems": 1, "items": _ref("EnvoyDescriptor")},
            **_both("hits_addend", _UINT),
        },
    },
    "EnvoyDescriptor": {
        "type": "object",
        "additionalProperties": False,
        **_once("hits_addend"),
        "properties": {
            "entries": {
                "type": ["array", "null"],
                "items": {
                    "type": "object",
                    "required": ["key"],
                    "additionalProperties": False,
                    "properties": {"key": _KEY_TEXT, "value": {"type": "string"}},
                },
            },
            "limit": {
                "type": ["object", "null"],
                "required": ["unit"],
                "anyOf": [{"required": ["requests_per_unit"]}, {"required": ["requestsPerUnit"]}],
                **_once("requests_per_unit"),
                "additionalProperties": False,
                "properties": {
                    **_both("requests_per_unit", _UINT),
                    "unit": {
                        "oneOf": [_UNIT, {"type": "integer", "minimum": 1, "maximum": 7}],
                        "description": "a name, or its number in Envoy's enum",
                    },
                },
            },
            **_both("hits_addend", _UINT),
        },
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
                        "application/json": {
                            "schema": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": MAX_BATCH,
                                "items": _ref("Check"),
                            }
                        }
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
                "summary": "Forget what a key's limit counted (admin: it gives the limit back)",
                "security": admin,
                "requestBody": _body("Reset"),
                "responses": {
                    "204": {"description": "forgotten"},
                    **_BAD,
                    "401": _ADMIN["401"],
                    "404": _problem("the admin endpoints are off: no admin token is set"),
                },
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
                "summary": "Readiness: the request store answers (the configuration store is"
                " reported, and makes the status 'degraded' when it does not answer)",
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
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": _json({"type": "object"}, "it")},
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "ratekeeper decision service", "version": VERSION},
        "paths": paths,
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
