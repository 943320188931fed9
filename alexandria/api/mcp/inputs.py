"""Strict tool input: an element cap checked before anything else, then the tool's schema.

Every refusal is the library's typed error (``errors.Malformed``: ``{error, code, details}``)
so an agent can correct its arguments and call again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema_rs

from alexandria.core.canonical import pointer
from alexandria.errors import Malformed

MAX_ELEMENTS = 2_000
"""Array elements plus object members of one call's arguments, counted cumulatively at every
depth: a bound on the work an argument document can ask for, checked before any of it."""


def count_elements(value: Any, limit: int = MAX_ELEMENTS) -> int:
    """Array elements and object members in ``value``, counted iteratively (no recursion, so
    deep nesting cannot exhaust the stack); stops counting once past ``limit``."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            total += len(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            total += len(item)
            stack.extend(item)
        if total > limit:
            break
    return total


class ArgumentChecker:
    """One tool's arguments against its input schema (JSON Schema 2020-12, jsonschema-rs)."""

    def __init__(self, tool: str, schema: dict[str, Any]) -> None:
        self.tool = tool
        self.allowed = sorted(schema.get("properties", {}))
        self._validator = jsonschema_rs.validator_for(schema)

    def check(self, arguments: Any) -> dict[str, Any]:
        counted = count_elements(arguments)
        if counted > MAX_ELEMENTS:
            raise Malformed(
                f"{self.tool}: the arguments hold more than {MAX_ELEMENTS:,} array elements and"
                " object members in all", "TOO_MANY_ELEMENTS", limit=MAX_ELEMENTS,
            )
        if not isinstance(arguments, dict):
            raise Malformed(f"{self.tool}: arguments are a JSON object", "BAD_ARGUMENT",
                            pointer="")
        unknown = sorted(set(arguments) - set(self.allowed))
        if unknown:
            raise Malformed(
                f"{self.tool}: unknown argument{'s' if len(unknown) > 1 else ''}"
                f" {', '.join(unknown)}; allowed: {', '.join(self.allowed)}",
                "UNKNOWN_ARGUMENT", unknown=unknown, allowed=self.allowed,
            )
        error = next(iter(self._validator.iter_errors(arguments)), None)
        if error is not None:
            where = pointer(*error.instance_path)
            raise Malformed(f"{self.tool}: argument {where or '/'}: {error.message}",
                            "BAD_ARGUMENT", pointer=where,
                            schema_path=pointer(*error.schema_path))
        return arguments
