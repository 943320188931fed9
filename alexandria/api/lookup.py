"""``GET /api/lookup?id=…``: what a full id or a unique prefix of one names (``reads/lookup.py``).

Not one of the contract's routes, which keep their strict 64-hex parameters: this one is for
people and tools holding the short ids pages print."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.http import json_response, library_of, query_params
from alexandria.errors import Malformed
from alexandria.reads import lookup


def kinds_param(raw: str | None) -> tuple[str, ...]:
    """``kind=revision,object``: the kinds of thing to look among (all by default)."""
    if raw is None or raw == "":
        return lookup.KINDS
    kinds = tuple(dict.fromkeys(raw.split(",")))
    if not set(kinds) <= set(lookup.KINDS):
        raise Malformed(f"kind is a comma-separated list of {', '.join(lookup.KINDS)}",
                        "BAD_PARAMETER", parameter="kind", allowed=list(lookup.KINDS))
    return kinds


async def get_lookup(request: Request) -> Response:
    params = query_params(request, ("id", "kind"))
    raw = params.get("id")
    if raw is None:
        raise Malformed("query parameter id is required", "MISSING_PARAMETER", parameter="id")
    prefix = lookup.parse_prefix(raw)
    kinds = kinds_param(params.get("kind"))
    found = await library_of(request).storage.read(
        lambda conn: lookup.resolve(conn, prefix, kinds))
    return json_response(found.to_json())


routes = [Route("/api/lookup", get_lookup, methods=["GET"])]
