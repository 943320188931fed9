"""``alexandria mcp`` through the ``mcp`` package's own client, over stdio, against a live
library on 127.0.0.1: the tool list, the contract's whole worked example published and read
back by owner and peer from their own homes, ``changes`` across two snapshots, typed refusals,
``verify`` against a server that alters one byte, and the read tools on ``/mcp``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from mcp import Client

from alexandria.api.mcp.inputs import MAX_ELEMENTS
from alexandria.api.mcp.schemas import route_parameters
from alexandria.api.served_contract import read_contract
from tests.support.cli import Library, module_library
from tests.support.library import CONTRACT
from tests.support.liveserver import NewDb, free_port
from tests.support.mcp import (
    READ_TOOLS,
    WRITE_TOOLS,
    agent,
    answer_bytes,
    call,
    refusal,
    resolve,
    tampering_proxy,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb) -> Iterator[Library]:
    yield from module_library(tmp_path_factory, "mcp", module_db, signing=True,
                              participants=("owner", "peer"))


async def every_change(client: Client, **args: Any) -> tuple[list[str], Any]:
    """The ``changes`` tool's pages from the start until ``has_more`` is false: every item's
    id, and the last cursor."""
    seen: list[str] = []
    cursor = None
    while True:
        page = await call(client, "changes", **args, **({"cursor": cursor} if cursor else {}))
        seen += [i["id"] for i in page["items"]]
        cursor = page["cursor"]
        if not page["has_more"]:
            return seen, cursor


async def publish_example(lib: Library, owner: Client, peer: Client) -> dict[str, str]:
    ids: dict[str, str] = {}
    for step in CONTRACT["object_examples"]["steps"]:
        client = owner if step["actor"] == "owner" else peer
        content = resolve(step["content"], ids)
        checked = await call(client, "validate", content=content)
        assert checked["valid"] is True and checked["already_admitted"] is False
        out = await call(client, "publish", content=content)
        assert out["created"] is True and out["signature_chain"] is True
        ids[step["name"]] = out["id"]
    return ids


async def test_worked_example_through_mcp(lib: Library) -> None:
    async with agent(lib.homes["owner"], lib.url) as owner, \
            agent(lib.homes["peer"], lib.url) as peer:
        tools = {t.name: t for t in (await owner.list_tools()).tools}
        assert set(tools) == READ_TOOLS | WRITE_TOOLS
        for name in READ_TOOLS - {"verify"}:
            assert "untrusted" in (tools[name].description or "") or name == "scores"
        # input schemas are the contract's: the catalogue's query parameters, exactly
        catalogue = next(r for r in read_contract()["routes"] if r["path"] == "/api/catalogue")
        assert set(route_parameters("/api/catalogue")) == set(catalogue["query"])
        assert set(tools["search"].input_schema["properties"]) == {
            *catalogue["query"], "detail", "max_bytes", "with_proof"}
        assert tools["search"].input_schema["additionalProperties"] is False
        assert tools["publish"].input_schema["properties"]["content"]["required"] == [
            "kind", "title", "body", "links", "previous"]

        resources = {str(r.uri) for r in (await owner.list_resources()).resources}
        assert resources == {"alexandria://contract", "alexandria://genesis",
                             "alexandria://write-schema"}
        pin = orjson.loads((await owner.read_resource("alexandria://genesis")).contents[0].text)
        assert pin["pin"] == lib.pin
        served = orjson.loads((await peer.read_resource("alexandria://contract")).contents[0].text)
        assert served["untrusted"]["format"] == "alexandria.agent-read-contract/1"

        ids = await publish_example(lib, owner, peer)

        # read back: search, object, discussion
        found = await call(peer, "search", q="successor", kind="claim", detail="full")
        assert [i["id"] for i in found["items"]] == [ids["merge"]]
        item = found["items"][0]
        assert item["root"] == ids["claim"] and item["verified"] is False
        assert item["signature_chain"] is True and item["inclusion"] is None
        assert item["untrusted"]["body"]["statement"] == CONTRACT["object_examples"]["steps"][
            -1]["content"]["body"]["statement"]
        proved = await call(peer, "search", q="successor", kind="claim", detail="ids",
                            with_proof=True)
        assert proved["items"][0]["verified"] is True, proved
        assert proved["checkpoint"]["verified"] is True
        assert proved["items"][0]["proof"]["tree_size"] == proved["checkpoint"]["size"]
        assert set(proved["items"][0]) >= {"id", "root", "entry", "leaf_index", "kind"}
        assert "untrusted" not in proved["items"][0]

        obj = await call(owner, "object", revision=ids["subspace"], section="children")
        assert obj["head"] == ids["subspace"]
        assert [a["id"] for a in obj["ancestors"]] == [ids["space"]]
        assert {i["root"] for i in obj["items"]} >= {ids["claim"], ids["discussion"]}
        assert all(i["signature_chain"] for i in [obj["item"], *obj["items"]])

        thread = await call(owner, "discussion", revision=ids["discussion"], sort="old")
        assert [i["id"] for i in thread["items"]] == [ids["reply"], ids["branch"]]
        assert thread["total"] == 2 and thread["next_offset"] is None
        links = await call(owner, "connections", revision=ids["claim"], detail="full")
        assert ids["claim"] in links["history"]
        assert {i["source"] for i in links["incoming"]} >= {ids["evidence"], ids["discussion"]}
        assert all("title" in i["untrusted"] for i in links["incoming"])
        head = await call(peer, "get", revision=ids["claim"], head=True)
        assert head["item"]["id"] == ids["merge"]

        # personal lists
        followed = await call(peer, "follow", revisions=[ids["claim"], ids["subspace"]])
        assert followed["changed"] is True
        assert followed["following"] == [ids["claim"], ids["subspace"]]
        await call(peer, "save", revisions=[ids["document"]])
        await call(peer, "unfollow", revisions=[ids["subspace"]])
        lists = await call(peer, "lists", detail="ids")
        assert lists["items"] == [{"list": "following", "root": ids["claim"]},
                                  {"list": "saved", "root": ids["document"]}]
        titled = await call(peer, "lists", detail="summary")
        assert titled["items"][0]["head"]["id"] == ids["merge"]
        merge = CONTRACT["object_examples"]["steps"][-1]["content"]
        assert titled["items"][0]["head"]["untrusted"]["title"] == merge["title"]

        # changes: the whole history in pages, then exactly what is new
        seen, cursor = await every_change(owner, root=ids["space"], detail="ids", limit=3)
        members = {ids[n] for n in ("space", "subspace", "claim", "discussion", "reply",
                                    "branch", "evidence", "assessment", "document",
                                    "proposal", "merge")}
        assert set(seen) == members and len(seen) == len(members)
        quiet = await call(owner, "changes", root=ids["space"], cursor=cursor)
        assert quiet["items"] == [] and quiet["has_more"] is False
        new = await call(peer, "publish", content={
            "kind": "reply", "title": "Later", "body": "One more thought.",
            "links": [{"relation": "replies_to", "target": ids["reply"]}], "previous": ""})
        after = await call(owner, "changes", root=ids["space"], cursor=quiet["cursor"])
        assert [i["id"] for i in after["items"]] == [new["id"]]
        assert after["snapshot"] > quiet["snapshot"]

        # typed refusals an agent can act on
        bad = await refusal(peer, "validate", content={
            "kind": "reply", "title": "Dangling", "body": "to nothing",
            "links": [{"relation": "replies_to", "target": "0" * 64}], "previous": ""})
        assert bad["code"] == "LINK_TARGET_MISSING"
        assert bad["details"]["status"] == 422
        assert bad["details"]["untrusted"]["details"]["pointer"] == "/record/links/0/target"
        schema = await refusal(peer, "validate", content={
            "kind": "claim", "title": "No statement", "body": {}, "links": [], "previous": ""})
        assert schema["code"] == "SCHEMA_VIOLATION"
        unknown = await refusal(peer, "search", q="x", colour="red")
        assert unknown["code"] == "UNKNOWN_ARGUMENT" and unknown["details"]["unknown"] == [
            "colour"]
        wrong = await refusal(peer, "search", sort="sideways")
        assert wrong["code"] == "BAD_ARGUMENT" and wrong["details"]["pointer"] == "/sort"
        many = await refusal(peer, "follow", revisions=["0" * 64] * (MAX_ELEMENTS + 1))
        assert many["code"] == "TOO_MANY_ELEMENTS"
        missing = await refusal(peer, "get", revision="f" * 64)
        assert missing["code"] == "UNKNOWN_REVISION"
        # the short ids pages print: resolved through the library's lookup
        short = await call(peer, "get", revision=ids["claim"][:12])
        assert short["item"]["id"] == ids["claim"]
        assert (await refusal(peer, "get", revision="fedcba98765"))["code"] == "UNKNOWN_ID"
        assert (await refusal(peer, "get", revision="abc"))["code"] == "BAD_ARGUMENT"
        forged = await refusal(peer, "changes", root=ids["space"], cursor="mcp1.AAAA")
        assert forged["code"] == "BAD_CURSOR"

        # verify: the signature chain and the inclusion proof, checked by the server itself
        checked = await call(peer, "verify", revision=ids["claim"])
        assert checked["verified"] is True and checked["signature_chain"] is True
        assert checked["inclusion"] is True and checked["entry"] == checked["leaf_index"] + 1 >= 1
        assert checked["checkpoint"]["untrusted"]["note"].startswith("127.0.0.1/cli-test/log\n")
        assert len(checked["proof"]["inclusion"]) >= 1


async def test_verify_fails_when_the_answer_is_tampered_with(lib: Library) -> None:
    async with agent(lib.homes["owner"], lib.url) as owner:
        claim = await call(owner, "publish", content={
            "kind": "claim", "title": "Claim to tamper", "links": [], "previous": "",
            "body": {"statement": "Two is even", "scope": "integers", "assumptions": []}})
        assert (await call(owner, "verify", revision=claim["id"]))["verified"] is True
    with tampering_proxy(lib.url) as proxy:
        async with agent(lib.homes["owner"], proxy) as tampered:
            result = await call(tampered, "verify", revision=claim["id"])
            assert result["verified"] is False
            assert result["failure"]["code"] == "REVISION_MISMATCH"
            got = await call(tampered, "get", revision=claim["id"], with_proof=True)
            assert got["item"]["verified"] is False
            assert got["item"]["signature_chain"] is False


async def test_read_tools_over_streamable_http(lib: Library) -> None:
    async with agent(lib.homes["owner"], lib.url) as owner:
        space = await call(owner, "publish", content={
            "kind": "space", "title": "Over HTTP", "body": {"summary": "read over /mcp"},
            "links": [], "previous": ""})
    async with Client(f"{lib.url}/mcp") as remote:
        names = {t.name for t in (await remote.list_tools()).tools}
        assert names == READ_TOOLS  # no key on the server: no write tools
        got = await call(remote, "get", revision=space["id"], with_proof=True)
        assert got["item"]["verified"] is True
        checked = await call(remote, "verify", revision=space["id"])
        assert checked["verified"] is True
        refused = await refusal(remote, "search", q="x", unknown=1)
        assert refused["code"] == "UNKNOWN_ARGUMENT"
        publish = await remote.call_tool("publish", {"content": {}})
        assert publish.is_error and publish.structured_content["code"] == "UNKNOWN_TOOL"


async def test_verify_says_whose_pin_it_used(lib: Library) -> None:
    """From a home that pinned the genesis, verify speaks of the reader's pin; over ``/mcp``,
    whose client pinned nothing, of the pin the library states; naming it each time."""
    async with agent(lib.homes["owner"], lib.url) as owner:
        space = await call(owner, "publish", content={
            "kind": "space", "title": "Whose pin", "body": {"summary": "pins"},
            "links": [], "previous": ""})
        mine = await owner.call_tool("verify", {"revision": space["id"]})
        tampered_id = space["id"][:-1] + ("0" if space["id"][-1] != "0" else "1")
    text = mine.content[0].text
    assert text.startswith(f"verify: verified, against your pinned genesis {lib.pin}."), text
    async with Client(f"{lib.url}/mcp") as remote:
        theirs = await remote.call_tool("verify", {"revision": space["id"]})
        text = theirs.content[0].text
        assert text.startswith("verify: verified, checked against the pin this library"
                               f" states: {lib.pin} (compare it with the pin you trust)"), text
        assert "your pinned" not in text
        unknown = await remote.call_tool("verify", {"revision": tampered_id})
        assert unknown.is_error  # an unknown revision is a refusal, not a verdict
    with tampering_proxy(lib.url) as proxy:
        async with agent(lib.homes["owner"], proxy) as tampered:
            failed = await tampered.call_tool("verify", {"revision": space["id"]})
    assert failed.structured_content["verified"] is False
    assert failed.content[0].text == ("verify: NOT verified (REVISION_MISMATCH), against your"
                                      f" pinned genesis {lib.pin}; see 'failure'.")


async def test_budgets_hold_on_long_discussions(lib: Library) -> None:
    long_text = "word " * 1500  # 7,500 characters a reply
    async with agent(lib.homes["owner"], lib.url) as owner:
        disc = await call(owner, "publish", content={
            "kind": "discussion", "title": "A long discussion", "links": [], "previous": "",
            "body": {"text": "Long replies follow. " * 50}})
        replies = []
        for i in range(60):
            out = await call(owner, "publish", content={
                "kind": "reply", "title": f"Reply {i}", "body": f"{i} {long_text}",
                "links": [{"relation": "replies_to", "target": disc["id"]}], "previous": ""})
            replies.append(out["id"])
        for detail in ("ids", "summary", "full"):
            for max_bytes in (1024, 4096, 16384, 65536):
                offset: int | None = 0
                got: list[str] = []
                while offset is not None:
                    result = await owner.call_tool("discussion", {
                        "revision": disc["id"], "detail": detail, "max_bytes": max_bytes,
                        "offset": offset})
                    assert not result.is_error, result.structured_content
                    assert answer_bytes(result) <= max_bytes, (detail, max_bytes)
                    page = result.structured_content
                    assert page["items"], (detail, max_bytes, page)
                    got += [i["id"] for i in page["items"]]
                    offset = page["next_offset"]
                assert got == replies, (detail, max_bytes)
        # every read tool holds its budget at the smallest size
        actor = (await call(owner, "get", revision=disc["id"]))["item"]["author"]
        for i in range(3):
            await call(owner, "publish", content={
                "kind": "vote", "title": "vote", "body": "1",
                "links": [{"relation": "votes_on", "target": replies[i]}], "previous": ""})
        await call(owner, "follow", revisions=[disc["id"]])
        for tool, args in (
            ("scores", {"author": actor}), ("lists", {"detail": "full"}),
            ("discussion", {"revision": disc["id"], "with_proof": True, "detail": "full"}),
            ("search", {"q": "word"}), ("get", {"revision": replies[0]}),
            ("object", {"revision": disc["id"], "section": "all"}),
            ("connections", {"revision": disc["id"]}),
            ("changes", {"root": disc["id"]}),
            ("verify", {"revision": replies[0], "detail": "full"}),
            ("search", {"q": "word", "with_proof": True, "detail": "full"}),
        ):
            for max_bytes in (1024, 3000):
                result = await owner.call_tool(tool, {**args, "max_bytes": max_bytes})
                assert not result.is_error, (tool, result.structured_content)
                assert answer_bytes(result) <= max_bytes, (tool, max_bytes)
        # changes with a budget cut mid-page resumes without a gap or a duplicate
        seen, _ = await every_change(owner, root=disc["id"], detail="full", max_bytes=20000)
        assert seen == [disc["id"], *replies]


async def test_publish_keeps_retries_and_rejects_like_the_cli(lib: Library) -> None:
    home = lib.homes["peer"]
    content = {"kind": "space", "title": "Offline first", "body": {"summary": "kept"},
               "links": [], "previous": ""}
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with agent(home, dead) as offline:
        kept = await refusal(offline, "publish", content=content)
        assert kept["code"] == "CONNECTION_FAILED"
        rev = kept["details"]["pending"]
        assert kept["details"]["retry"] == {"retry": rev}
    envelope = (home / "pending" / f"{rev}.json").read_bytes()
    async with agent(home, lib.url) as online:
        again = await call(online, "publish", retry=rev)
        assert again["id"] == rev and again["created"] is True  # the same bytes, not re-signed
        assert not (home / "pending" / f"{rev}.json").exists()
        assert (home / "published" / f"{rev}.json").exists()
        stored = orjson.loads((home / "published" / f"{rev}.json").read_bytes())
        assert stored["record"] == orjson.loads(envelope)["record"]
        gone = await refusal(online, "publish", retry=rev)
        assert gone["code"] == "NOT_PENDING"
        both = await refusal(online, "publish", content=content, retry=rev)
        assert both["code"] == "BAD_ARGUMENT"
        rejected = await refusal(online, "publish", content={
            "kind": "reply", "title": "Dangling", "body": "to nothing",
            "links": [{"relation": "replies_to", "target": "1" * 64}], "previous": ""})
        assert rejected["code"] == "LINK_TARGET_MISSING"
        assert len(list((home / "rejected").glob("*.error.json"))) == 1


async def test_publish_several_contributions_in_one_batch(lib: Library) -> None:
    home = lib.homes["peer"]
    space = {"kind": "space", "title": "Batch space", "body": {"summary": "many"},
             "links": [], "previous": ""}
    dangling = {"kind": "reply", "title": "Dangling", "body": "to nothing",
                "links": [{"relation": "replies_to", "target": "2" * 64}], "previous": ""}
    unsigned = {"kind": "space", "title": "", "body": {"summary": "no title"}}
    other = {**space, "title": "Another batch space"}
    async with agent(home, lib.url) as client:
        out = await call(client, "publish", contributions=[space, dangling, unsigned, other])
        results = out["results"]
        assert [r["status"] for r in results] == ["admitted", "rejected", "refused", "admitted"]
        assert (out["admitted"], out["rejected"], out["refused"], out["kept"]) == (2, 1, 1, 0)
        assert results[1]["error"]["code"] == "LINK_TARGET_MISSING"
        for r in (results[0], results[3]):
            assert r["created"] is True and r["signature_chain"] is True
            assert (home / "published" / f"{r['id']}.json").exists()
        assert (home / "rejected" / f"{results[1]['id']}.json").exists()
        assert not list((home / "pending").glob("*.json"))
        got = await call(client, "get", revision=results[3]["id"])
        assert results[3]["id"] in str(got)
        both = await refusal(client, "publish", content=space, contributions=[space])
        assert both["code"] == "BAD_ARGUMENT"
