"""``GET /api/contract``: the read contract as this server enforces it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from alexandria.api.served_contract import enforced_limits
from alexandria.reads import changes
from tests.support.library import ROOT, Api

GIVEN = json.loads((ROOT / "contracts" / "alexandria-contract.json").read_text())


async def get_contract(api: Api, base: str = "http://testserver") -> dict[str, Any]:
    r = await api.client.get(f"{base}/api/contract")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    out: dict[str, Any] = r.json()
    return out


async def test_served_contract_is_the_given_one_with_this_origin_and_limits(api: Api) -> None:
    served = await get_contract(api)
    assert served["origin"] == "http://testserver"
    assert {k: v for k, v in served.items() if k not in ("origin", "limits")} == {
        k: v for k, v in GIVEN.items() if k not in ("origin", "limits")}
    # every limit of the contract is served, with the value this server enforces: the same
    for name, value in GIVEN["limits"].items():
        assert served["limits"][name] == value, name
    assert served["limits"]["envelope_bytes"] == 65_536
    assert served["limits"]["body_characters"] == 48_000


async def test_origin_is_not_the_host_header(api: Api) -> None:
    r = await api.client.get("http://testserver/api/contract", headers={"host": "evil.example"})
    assert r.json()["origin"] == "http://testserver"


async def test_limits_are_read_from_what_is_enforced(api: Api) -> None:
    api.library.limits = changes.Limits(page_bytes=4096, scan=100)
    served = await get_contract(api)
    assert served["limits"]["changes_item_bytes"] == 4096
    assert served["limits"]["changes_scan_revisions"] == 100
    assert enforced_limits()["changes_item_bytes"] == GIVEN["limits"]["changes_item_bytes"]


async def test_the_enforced_source_limit_is_the_served_one(api: Api) -> None:
    """An evidence with one source more than the served source_count is refused."""
    limit = (await get_contract(api))["limits"]["source_count"]
    claim = await api.publish("owner", {"kind": "claim", "title": "C", "body": {
        "statement": "s", "scope": "s", "assumptions": []}, "links": [], "previous": ""})

    def evidence(n: int) -> dict[str, Any]:
        return {"kind": "evidence", "title": "E", "body": {
            "claim": claim["id"], "method": "source", "content": "c",
            "sources": [{"label": f"s{i}", "url": f"https://example.org/{i}"} for i in range(n)]},
            "links": [{"relation": "evidence_for", "target": claim["id"]}], "previous": ""}

    r = await api.post(api.envelope("peer", evidence(limit + 1)))
    assert r.status_code == 422
    await api.publish("peer", evidence(limit))


@pytest.mark.parametrize("query", ["?x=1", "?origin=a"])
async def test_no_parameters(api: Api, query: str) -> None:
    r = await api.client.get(f"/api/contract{query}")
    assert r.status_code == 400 and r.json()["code"] == "UNKNOWN_PARAMETER"
