"""Tool input schemas, derived from the contracts and never copied, and the ``Tool`` record.

A read tool's parameters are the OpenAPI description's parameters of its route
(``api/openapi.py``, itself checked against the handlers and named as in the read contract's
``routes[].query``), with ``"true"|"false"`` query enums as JSON booleans; the budget
parameters (``answers.py``) are added once, here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from alexandria.api.mcp.answers import (
    DEFAULT_DETAIL,
    DEFAULT_MAX_BYTES,
    DETAILS,
    MAX_MAX_BYTES,
    MIN_MAX_BYTES,
)
from alexandria.api.mcp.inputs import ArgumentChecker
from alexandria.api.openapi import PATHS

Answer = tuple[dict[str, Any], str]
"""Structured content and the text line."""

BUDGET_PROPERTIES: dict[str, Any] = {
    "detail": {"enum": list(DETAILS), "default": DEFAULT_DETAIL},
    "max_bytes": {"type": "integer", "minimum": MIN_MAX_BYTES, "maximum": MAX_MAX_BYTES,
                  "default": DEFAULT_MAX_BYTES},
}
"""Described once, in the server's instructions (``server.py``), not in every tool."""
WITH_PROOF: dict[str, Any] = {"with_proof": {"type": "boolean", "default": False}}


#: A tool's ``revision``: the tools resolve a prefix through the library's ``GET /api/lookup``.
REVISION_OR_PREFIX: dict[str, Any] = {
    "type": "string", "pattern": "^[0-9a-f]{8,64}$",
    "description": "a revision id or a unique prefix of one (8+ hex)",
}


def _property(param: Mapping[str, Any]) -> dict[str, Any]:
    """A route parameter as a tool argument: its schema, and its description's first clause
    (the rest is the HTTP route's: status codes, limits the schema already states)."""
    schema = dict(param["schema"])
    if schema.get("enum") == ["true", "false"]:
        schema = {"type": "boolean", "default": schema.get("default") == "true"}
    return {**schema, "description": param["description"].split("; ")[0]}


def route_schema(path: str, extra: Mapping[str, Any] | None = None,
                 extra_required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON Schema of a tool over ``GET path``: the route's documented parameters."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in PATHS[path]["get"]["parameters"]:
        properties[param["name"]] = (REVISION_OR_PREFIX if param["name"] == "revision"
                                     and param["in"] == "path" else _property(param))
        if param.get("required"):
            required.append(param["name"])
    properties.update(extra or {})
    return {"type": "object", "properties": properties,
            "required": [*required, *extra_required], "additionalProperties": False}


def route_parameters(path: str) -> tuple[str, ...]:
    return tuple(p["name"] for p in PATHS[path]["get"]["parameters"] if p["in"] == "query")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[dict[str, Any]], Awaitable[Answer]] = field(repr=False)
    read_only: bool = True
    check_schema: dict[str, Any] | None = None
    """What arguments are validated against, when it differs from the advertised schema (the
    ``content`` of a contribution is judged by the library itself, with its typed errors)."""

    def checker(self) -> ArgumentChecker:
        return ArgumentChecker(self.name, self.check_schema or self.input_schema)
