"""``GET /api/openapi.json`` describes exactly the routes the real app mounts."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
from starlette.routing import Route

from alexandria.api.app import create_app
from alexandria.api.web import routes as web_routes
from tests.support.library import Api

METHODS = ("get", "post", "put", "patch", "delete")


async def get_document(api: Api) -> dict[str, Any]:
    r = await api.client.get("/api/openapi.json")
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


def mounted(api: Api) -> set[tuple[str, str]]:
    app = create_app(api.library, manage_lifecycle=False)
    out = set()
    for route in app.routes:
        if route in web_routes.routes:
            # the HTML pages (docs/pages.md) are for people, not part of the JSON API
            continue
        assert isinstance(route, Route)
        if not route.include_in_schema:  # a 405 beside a route of another method
            continue
        for method in route.methods or ():
            if method != "HEAD":
                out.add((route.path, method.lower()))
    return out


async def test_every_mounted_route_is_described_and_every_described_route_mounted(
    api: Api,
) -> None:
    doc = await get_document(api)
    described = {(path, m) for path, item in doc["paths"].items() for m in item if m in METHODS}
    assert mounted(api) == described


async def test_document_shape(api: Api) -> None:
    doc = await get_document(api)
    assert doc["openapi"] == "3.1.0"
    assert doc["servers"] == [{"url": "http://testserver"}]
    for schema in doc["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    refs = set(re.findall(r'"#/components/(\w+)/(\w+)"', str(doc).replace("'", '"')))
    for section, name in refs:
        assert name in doc["components"][section], name
    for path, item in doc["paths"].items():
        template = set(re.findall(r"{(\w+)}", path))
        for method, op in item.items():
            assert op["summary"] and op["responses"], (path, method)
            in_path = {p["name"] for p in op["parameters"] if p["in"] == "path"}
            assert in_path == template, (path, method)
            assert "400" in op["responses"] or method == "post", (path, method)
            if template:
                assert "404" in op["responses"], (path, method)
            for p in op["parameters"]:
                jsonschema.Draft202012Validator.check_schema(p["schema"])


def _example(param: dict[str, Any]) -> str:
    schema = param["schema"]
    if "examples" in schema:
        return str(schema["examples"][0])
    if "enum" in schema:
        return str(schema["enum"][0])
    if schema.get("pattern") == "^[0-9a-f]{64}$":
        return "0" * 64
    if schema.get("type") == "integer":
        return str(schema.get("minimum", 0))
    return "word"


async def test_described_query_parameters_are_the_accepted_ones(api: Api) -> None:
    """Each documented query parameter is accepted (never UNKNOWN_PARAMETER); any other is
    refused with 400 UNKNOWN_PARAMETER."""
    doc = await get_document(api)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            url = path.replace("{revision}", "0" * 64)
            query = {p["name"]: _example(p) for p in op["parameters"] if p["in"] == "query"}
            for name in query:
                r = await api.client.request(method.upper(), url, params={name: query[name]},
                                             content=b"{}")
                if r.status_code == 400:
                    body = r.json()
                    assert body["code"] != "UNKNOWN_PARAMETER", (path, method, name, body)
                    assert body["details"].get("parameter") != name or body["code"] in (
                        "MISSING_PARAMETER",), (path, method, name, body)
            r = await api.client.request(method.upper(), url, params={**query, "zzz": "1"},
                                         content=b"{}")
            assert r.status_code == 400, (path, method, r.text)
            assert r.json()["code"] == "UNKNOWN_PARAMETER", (path, method, r.text)


async def test_what_the_fuzzing_audit_found_is_now_documented(api: Api) -> None:
    """Issue 21: each difference between the document and the server that 63,000 generated
    requests found."""
    doc = await get_document(api)
    paths = doc["paths"]
    # OPTIONS names every method the path serves (it named POST only)
    r = await api.client.options("/api/authority")
    assert r.status_code == 405
    assert {m.strip() for m in r.headers["allow"].split(",")} >= {"GET", "POST"}
    assert {m for m in paths["/api/authority"] if m in METHODS} == {"get", "post"}
    # /api/changes' 404 UNKNOWN_ROOT
    assert "UNKNOWN_ROOT" in paths["/api/changes"]["get"]["responses"]["404"]["description"]
    r = await api.client.get("/api/changes", params={"root": "ab" * 32})
    assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_ROOT"
    # the catalogue's 16-word limit
    q = next(p for p in paths["/api/catalogue"]["get"]["parameters"] if p["name"] == "q")
    assert "at most 16 distinct words" in q["description"]
    r = await api.client.get("/api/catalogue", params={"q": " ".join(f"w{i}" for i in range(17))})
    assert r.status_code == 400 and r.json()["code"] == "QUERY_TOO_LONG"
    # old >= 1 of the consistency proof
    old = paths["/api/log/proof/consistency"]["get"]["parameters"][0]
    assert old["name"] == "old" and old["schema"]["minimum"] == 1
    # the authority body schema refuses {"signatures": []} and any other lone key
    body = paths["/api/authority"]["post"]["requestBody"]["content"]["application/json"]
    validator = jsonschema.Draft202012Validator(
        {**body["schema"], "components": doc["components"]})
    assert not validator.is_valid({"signatures": []})
    assert not validator.is_valid({"genesis": {}, "signatures": [{"key": "a" * 64,
                                                                   "signature": "b" * 128}]})
    # request schemas name the kinds each route admits
    def kinds(path: str) -> list[str]:
        schema = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        return list(schema["allOf"][1]["properties"]["record"]["properties"]["kind"]["enum"])

    assert "vote" in kinds("/api/entries") and "personal-state" not in kinds("/api/entries")
    assert kinds("/api/personal") == ["personal-read", "personal-state"]
