"""The schemas of the OpenAPI document's components, by area: the checks a request asks for,
the results it is answered with, the configuration store's overrides, problems, Envoy's
``RateLimitRequest`` and ``RateLimitResponse`` in protobuf's JSON, and the dashboard's figures
(``dashboard``). Each states what the parsers of ``ratekeeper.service.http.bodies`` and
``ratekeeper.service.http.envoy_json`` take; a test holds them to it.
"""

from __future__ import annotations

from typing import Any

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.inputs import MAX_COST
from ratekeeper.rules.model import UNITS
from ratekeeper.service.http.envoy_json import camel
from ratekeeper.service.http.openapi import dashboard
from ratekeeper.service.http.openapi.shared import ref

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
        ref("Override"),
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


def schemas() -> dict[str, Any]:
    """Every schema of the document, by name."""
    return {
        **_checks(),
        **_results(),
        **_overrides(),
        **_problems(),
        **_envoy(),
        **dashboard.schemas(),
    }


def _checks() -> dict[str, Any]:
    """What ``/v1/check``, ``/v1/peek``, ``/v1/check/batch`` and ``/v1/reset`` take."""
    return {
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
                "descriptors": {"type": "array", "minItems": 1, "items": ref("Descriptor")},
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
        "Check": {"oneOf": [ref("KeyCheck"), ref("DescriptorCheck")]},
        "Reset": {
            "type": "object",
            "required": ["key"],
            "additionalProperties": False,
            "properties": {"key": _KEY_TEXT, "limit": _LIMIT},
        },
    }


def _results() -> dict[str, Any]:
    """What a decision is answered with."""
    return {
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
                "statuses": {"type": "array", "items": ref("Status")},
            },
        },
        "BatchResult": {
            "type": "object",
            "properties": {
                "allowed": {"type": "boolean"},
                "results": {"type": "array", "items": ref("Result")},
            },
        },
    }


def _overrides() -> dict[str, Any]:
    """The configuration store's per-key overrides."""
    return {
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
                    "default": "fixed_window",
                    "description": "fixed_window when absent, or bucketed_window when a "
                    "granularity is given",
                },
                "granularity": {"type": ["number", "null"], "exclusiveMinimum": 0},
                "burst": {**_AMOUNT, "type": ["integer", "null"]},
                "sync": {
                    "enum": ["exact", "leased"],
                    "default": "exact",
                    "description": "leased: each instance grants from slices of the budget",
                },
            },
        },
        "StoredOverride": {
            "type": "object",
            "properties": {
                "domain": {"type": "string"},
                "key": {"type": "string"},
                "override": ref("Override"),
            },
        },
    }


def _problems() -> dict[str, Any]:
    """An ``application/problem+json`` body."""
    return {
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
    }


def _envoy() -> dict[str, Any]:
    """Envoy's ``POST /json``: a ``RateLimitRequest`` and its ``RateLimitResponse``."""
    return {
        "EnvoyRequest": {
            "type": "object",
            "description": "envoy.service.ratelimit.v3.RateLimitRequest in protobuf's JSON: names "
            "in snake_case or lowerCamelCase, 64-bit integers possibly quoted, null for a default",
            "required": ["domain", "descriptors"],
            "additionalProperties": False,
            **_once("hits_addend"),
            "properties": {
                "domain": _KEY_TEXT,
                "descriptors": {"type": "array", "minItems": 1, "items": ref("EnvoyDescriptor")},
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
                    "description": "requests_per_unit left out is 0 (always over), as protobuf's "
                    "JSON leaves a zero out",
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
