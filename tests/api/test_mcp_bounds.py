"""``POST /mcp`` on a live ``alexandria serve``, as strangers use it: tool calls beyond the
per-client and global bounds (calls at once, share of time) are answered at once 429
``CLIENT_BUSY`` / 503 ``SERVER_BUSY`` with ``Retry-After`` and the typed error body; and
what the server checked for one caller is remembered for the next (counted in ``/metrics``,
not timed)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from alexandria.api.mcp.http import BURST_S, CALLS, CALLS_PER_CLIENT, SHARE
from tests.support.cli import Library, module_library
from tests.support.mcp import agent, call

pytestmark = pytest.mark.slow

HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]  # searched in the bursts
QUIET = ["kappa", "lambda"]  # searched only where what is remembered is counted


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    yield from module_library(tmp_path_factory, "mcp-bounds", signing=True,
                              participants=("owner",))


@pytest.fixture(scope="module")
def published(lib: Library) -> list[str]:
    """Three spaces about each word."""
    async def publish() -> list[str]:
        ids = []
        async with agent(lib.homes["owner"], lib.url) as owner:
            for word in WORDS + QUIET:
                for n in range(3):
                    out = await call(owner, "publish", content={
                        "kind": "space", "title": f"{word} {n}", "links": [], "previous": "",
                        "body": {"summary": f"all about {word}, part {n}"}})
                    ids.append(out["id"])
        return ids

    return asyncio.run(publish())


def tool_call(name: str, arguments: dict[str, Any], n: int = 1) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                         "params": {"name": name, "arguments": arguments}})


async def burst(url: str, sources: list[str], each: int) -> list[httpx.Response]:
    """``each`` proof searches at once from every source address in ``sources`` (127.0.0.x:
    loopback, so every one is a client address of its own)."""
    clients = [httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=source),
                                 timeout=60) for source in sources]
    try:
        return list(await asyncio.gather(*(
            c.post(f"{url}/mcp", headers=HEADERS, content=tool_call(
                "search", {"q": WORDS[i % len(WORDS)], "with_proof": True, "detail": "full",
                           "max_bytes": 65536}, i))
            for c in clients for i in range(each))))
    finally:
        for c in clients:
            await c.aclose()


def refused(answers: list[httpx.Response], status: int, code: str) -> list[httpx.Response]:
    out = [r for r in answers if r.status_code == status]
    for r in out:
        body = r.json()
        assert body["code"] == code and set(body) == {"error", "code", "details"}
        assert r.headers["retry-after"] == str(body["details"]["retry_after"])
        assert body["details"]["retry_after"] >= 1
    return out


async def quiet(url: str, full: bool = False) -> None:
    """Until ``/mcp`` takes a tool call again (its share of time refilled after a burst);
    ``full``: and then until its whole budget has refilled."""
    async with httpx.AsyncClient(timeout=60) as c:
        for _ in range(60):
            r = await c.post(f"{url}/mcp", headers=HEADERS,
                             content=tool_call("get", {"revision": "f" * 64}))
            if r.status_code == 200:
                if full:
                    await asyncio.sleep(BURST_S / SHARE)
                return
            await asyncio.sleep(float(r.headers["retry-after"]))
    pytest.fail("/mcp never took a call again")


async def test_calls_beyond_a_clients_bound_are_refused_429(lib: Library,
                                                            published: list[str]) -> None:
    for _round in range(5):  # the calls must overlap: a loaded machine may serialise a burst
        await quiet(lib.url)
        answers = await burst(lib.url, ["127.0.0.1"], 24)
        busy = refused(answers, 429, "CLIENT_BUSY")
        spent = refused(answers, 503, "SERVER_BUSY")  # the share of time, once spent
        served = [r for r in answers if r.status_code == 200]
        assert len(busy) + len(spent) + len(served) == len(answers), [
            r.status_code for r in answers]
        assert all("result" in r.json() for r in served)
        if busy:
            assert busy[0].json()["details"]["limit"] == CALLS_PER_CLIENT
            break
    else:
        pytest.fail("24 simultaneous calls from one address were never over its bound")
    # anything but a tool call is not bounded: the tool list is always answered
    listed = await burst_list(lib.url)
    assert all(r.status_code == 200 for r in listed)


async def burst_list(url: str) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60) as c:
        return list(await asyncio.gather(*(
            c.post(f"{url}/mcp", headers=HEADERS, content=orjson.dumps(
                {"jsonrpc": "2.0", "id": i, "method": "tools/list"})) for i in range(12))))


async def test_calls_beyond_the_servers_bound_are_refused_503(lib: Library,
                                                              published: list[str]) -> None:
    sources = [f"127.0.0.{i}" for i in range(2, 2 + 3 * CALLS)]
    for _round in range(5):
        await quiet(lib.url)
        answers = await burst(lib.url, sources, CALLS_PER_CLIENT)  # never over a client's
        busy = refused(answers, 503, "SERVER_BUSY")
        served = [r for r in answers if r.status_code == 200]
        assert len(busy) + len(served) == len(answers), [r.status_code for r in answers]
        if busy:
            assert busy[0].json()["details"]["limit"] == CALLS
            break
    else:
        pytest.fail(f"{len(sources) * CALLS_PER_CLIENT} simultaneous calls were never over"
                    " the server's bound")


def verifications(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^alexandria_mcp_verifications_total\{step="(\w+)"\} (\S+)$', text, re.M)}


async def taken(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """``call``, again after a second while the call is refused: each worker process keeps its
    own share of time and ``quiet`` saw one of them (a refused call checks nothing)."""
    for _ in range(30):
        try:
            return await call(client, tool, **arguments)
        except MCPError:
            await asyncio.sleep(1)
    pytest.fail("/mcp refused the call for 30 s")


async def test_what_was_checked_for_one_caller_is_remembered(lib: Library,
                                                            published: list[str]) -> None:
    args = {"q": QUIET[0], "with_proof": True, "detail": "ids"}
    await quiet(lib.url, full=True)
    async with Client(f"{lib.url}/mcp") as first:
        warm = await taken(first, "search", **args)
    note = warm["checkpoint"]["untrusted"]["note"]
    before = verifications(lib.url)
    async with Client(f"{lib.url}/mcp") as second:  # another stranger, the same question
        again = await taken(second, "search", **args)
        assert [i["id"] for i in again["items"]] == [i["id"] for i in warm["items"]]
        assert all(i["verified"] for i in again["items"]) and len(again["items"]) == 3
        after = verifications(lib.url)
        assert after.get("signature_chain") == before.get("signature_chain")
        if again["checkpoint"]["untrusted"]["note"] == note:  # the same checkpoint
            assert after.get("inclusion") == before.get("inclusion")
        # a record not checked before is checked once, and only it
        other = await taken(second, "search", q=QUIET[1], with_proof=True, detail="ids")
        assert len(other["items"]) == 3
        checked = verifications(lib.url)
        assert checked["signature_chain"] == after["signature_chain"] + 3
