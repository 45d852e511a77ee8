"""What the parts of the OpenAPI document share: a reference to a schema, a JSON answer or
body, the problems of some kinds (each under the status of its kind, as the service answers
it), the bearer token's security, and an HTML answer."""

from __future__ import annotations

from typing import Any

from ratekeeper.wire.problems import KINDS, MEDIA_TYPE


def ref(name: str) -> dict[str, str]:
    """A reference to the schema ``name``."""
    return {"$ref": f"#/components/schemas/{name}"}


def json_answer(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def json_body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(name)}}}


def problems(*described: tuple[str, str]) -> dict[str, Any]:
    """The answers of ``described``, (kind, description) pairs: each a problem, under the
    status of its kind."""
    return {
        str(KINDS[kind].status): {
            "description": description,
            "content": {MEDIA_TYPE: {"schema": ref("Problem")}},
        }
        for kind, description in described
    }


SECURITY: list[dict[str, list[str]]] = [{"bearer": []}]
HTML = {"text/html": {"schema": {"type": "string"}}}
