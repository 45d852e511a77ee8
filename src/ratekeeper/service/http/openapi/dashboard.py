"""The dashboard's part of the OpenAPI document (``serve --dashboard``): its page and sign-in,
its figures as JSON (``GET /v1/stats``, ``GET /v1/top``), and their schemas."""

from __future__ import annotations

from typing import Any

from ratekeeper.service.http.openapi.shared import (
    HTML,
    SECURITY,
    json_answer,
    problems,
    ref,
)

#: The answers of a dashboard route without the admin token, or with the dashboard off.
_LOOKING = problems(
    ("unauthorized", "no or a wrong bearer token (or sign-in cookie)"),
    ("not-found", "the dashboard is off (serve --dashboard turns it on)"),
)


def paths() -> dict[str, Any]:
    """The dashboard (``serve --dashboard``): its figures as JSON, and its page."""
    return {**_figures(), **_page()}


def _figures() -> dict[str, Any]:
    """``/v1/stats`` and ``/v1/top``."""
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
    return {
        "/v1/stats": {
            "get": {
                "summary": "Everything the dashboard shows",
                "security": SECURITY,
                "responses": {"200": json_answer(ref("Stats"), "the figures"), **_LOOKING},
            }
        },
        "/v1/top": {
            "get": {
                "summary": "The keys of the most decisions and refusals over a window",
                "security": SECURITY,
                "parameters": [window, n],
                "responses": {
                    "200": json_answer(ref("Top"), "the keys"),
                    **_LOOKING,
                    **problems(("invalid", "a window or n out of its range")),
                },
            }
        },
    }


def _page() -> dict[str, Any]:
    """The page, its sign-in and sign-out, and its files."""
    signed_in = {"303": {"description": "signed in: to /dashboard, with the sign-in cookie"}}
    form = {"description": "the sign-in form", "content": HTML}
    return {
        "/dashboard": {
            "get": {
                "summary": "The dashboard's page (with ?token=, sign in and come back)",
                "parameters": [{"name": "token", "in": "query", "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": "the page", "content": HTML},
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


def _object(properties: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    """An object of exactly ``properties``, all required."""
    found: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    if description is not None:
        found["description"] = description
    return found


_TEXT_OR_NULL = {"type": ["string", "null"]}
_WHOLE = {"type": "integer", "minimum": 0}
_PER_SECOND = {"type": "array", "items": _WHOLE, "description": "one count a second"}
_RESULTS = {"allowed": _PER_SECOND, "limited": _PER_SECOND, "shadowed": _PER_SECOND}


def schemas() -> dict[str, Any]:
    """The dashboard's figures: ``GET /v1/stats`` and ``GET /v1/top``."""
    return {**_top(), "RuleDescriptor": _rule_descriptor(), "Stats": _stats()}


def _top() -> dict[str, Any]:
    """The keys of the most decisions and of the most refusals, over a window."""
    listed = _object(
        {
            "domain": {"type": "string"},
            "key": {"type": "string"},
            "count": {**_WHOLE, "description": "at most error below the true count"},
            "at_most": {**_WHOLE, "description": "count + error: the true count is no more"},
            "rule": _TEXT_OR_NULL,
            "limit": _TEXT_OR_NULL,
            "algorithm": _TEXT_OR_NULL,
            "remaining": {"type": ["integer", "null"]},
            "allowed": {"type": ["boolean", "null"]},
        },
        "a key, and its latest decision",
    )
    return {
        "TopKeys": _object(
            {
                "total": {**_WHOLE, "description": "hits in the window, exactly"},
                "error": {**_WHOLE, "description": "each count is at most this below the truth"},
                "bound": {**_WHOLE, "description": "error never exceeds total // (capacity + 1)"},
                "keys": {"type": "array", "items": listed},
            }
        ),
        "Top": _object(
            {
                "window": {"type": "integer", "minimum": 10, "maximum": 300},
                "span": {**_WHOLE, "description": "seconds covered: whole slots, the current one"},
                "slot": {"type": "integer", "minimum": 1},
                "capacity": {"type": "integer", "minimum": 1},
                "requests": ref("TopKeys"),
                "refused": ref("TopKeys"),
            },
            "the keys of the most decisions, and of the most refusals (limited or shadowed)",
        ),
    }


def _rule_descriptor() -> dict[str, Any]:
    """One descriptor of the rules' tree, its children within."""
    return _object(
        {
            "key": {"type": "string"},
            "value": _TEXT_OR_NULL,
            "path": {"type": "string"},
            "name": _TEXT_OR_NULL,
            "limit": _TEXT_OR_NULL,
            "algorithm": _TEXT_OR_NULL,
            "unlimited": {"type": "boolean"},
            "always_over": {"type": "boolean"},
            "shadow_mode": {"type": "boolean"},
            "quota_mode": {"type": "boolean"},
            "children": {"type": "array", "items": ref("RuleDescriptor")},
        }
    )


def _stats() -> dict[str, Any]:
    """Everything the dashboard shows (``GET /v1/stats``)."""
    return _object(
        {
            "version": {"type": "string"},
            "now": {"type": "number"},
            "started": {"type": "number", "description": "when recording began"},
            "workers": {"type": "integer", "minimum": 1},
            "series": _object(
                {
                    "step": {"const": 1},
                    "start": {"type": "integer"},
                    **_RESULTS,
                    "degraded": _PER_SECOND,
                }
            ),
            "rules": {
                "type": "array",
                "items": _object(
                    {
                        "domain": {"type": "string"},
                        "rule": {"type": "string"},
                        "limit": _TEXT_OR_NULL,
                        "algorithm": _TEXT_OR_NULL,
                        **_RESULTS,
                        "degraded": _PER_SECOND,
                    }
                ),
            },
            "latency": {"type": "object"},
            "store": {"type": "object"},
            "config": {"type": ["object", "null"]},
            "reload": {"type": "object"},
            "tree": {
                "type": "array",
                "items": _object(
                    {
                        "domain": {"type": "string"},
                        "descriptors": {"type": "array", "items": ref("RuleDescriptor")},
                    }
                ),
            },
            "overrides": {"type": "object"},
            "top": ref("Top"),
        },
        "what the dashboard shows; the series are per second, the current one last",
    )
