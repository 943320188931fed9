"""First contact for an agent, through the ``mcp`` package's own stdio client, as a client
configured by pasting the README would start the server: the README's ``mcpServers`` block run
as written after the tour (a home made by ``login``), reading with no login (a pin, or trust on
first use), ``whoami``, the refusals that name ``alexandria login``, idempotent and duplicate
publishing, and answers a text-only client can act on."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.cli import CLI, ROOT, Library, cli, cli_env, module_library
from tests.support.liveserver import free_port
from tests.support.mcp import answer_bytes, call, refusal
from tests.support.readme import tour_after_demo

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
PLACEHOLDER = "/path/to/alexandria"
README_LIBRARY = "http://127.0.0.1:8080"


def readme_config() -> dict[str, Any]:
    """The README's MCP client configuration: its one JSON block with ``mcpServers``."""
    blocks = [b for b in re.findall(r"```json\n(.*?)```", README.read_text(), re.S)
              if "mcpServers" in b]
    assert len(blocks) == 1, "the README shows one mcpServers configuration"
    config: dict[str, Any] = orjson.loads(blocks[0])
    return config


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    yield from module_library(tmp_path_factory, "first-contact", signing=True)


@pytest.fixture(scope="module")
def tour(lib: Library, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory as the tour leaves it: the clone's ``.venv`` and ``alexandria-alice/``, a
    home made by ``login`` and approved by the operator, as the tour does."""
    directory = tmp_path_factory.mktemp("clone")
    (directory / ".venv").symlink_to(ROOT / ".venv")
    home = directory / "alexandria-alice"
    code = cli("login", lib.url, "--name", "alice", "--genesis", lib.pin, "--no-wait",
               home=home).stdout.strip()
    cli("authority", "approve", code, "--dir", str(lib.operator), "--library", lib.url)
    cli("login", home=home)
    return directory


def server_params(directory: Path, url: str) -> StdioServerParameters:
    """The README's configuration with its placeholders filled in as the README says."""
    entry = readme_config()["mcpServers"]["alexandria"]
    text = orjson.dumps(entry).decode().replace(PLACEHOLDER, str(directory)).replace(
        README_LIBRARY, url)
    filled = orjson.loads(text)
    assert set(filled) == {"command", "args", "env"}
    return StdioServerParameters(command=filled["command"], args=filled["args"],
                                 env=filled["env"])


@asynccontextmanager
async def connected(params: StdioServerParameters) -> AsyncIterator[Client]:
    async with Client(params, read_timeout_seconds=60) as client:
        yield client


def text_json(result: Any) -> Any:
    """The structured content as a text-only client sees it: the second text block."""
    assert len(result.content) == 2, result.content
    return orjson.loads(result.content[1].text)


async def test_the_readme_configuration_runs_as_written(lib: Library, tour: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    # the shell of the tour had these; the SDK's client does not pass them on
    monkeypatch.setenv("ALEXANDRIA_LIBRARY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("ALEXANDRIA_HOME", str(tour / "nowhere"))
    async with connected(server_params(tour, lib.url)) as client:
        me = await call(client, "whoami")
        assert me["logged_in"] is True and re.fullmatch(r"[0-9a-f]{64}", me["actor"]), me
        assert me["library"] == lib.url and me["pin"] == lib.pin and me["pinned_by"] == "home"
        assert me["certificate"]["valid_now"] is True and "library.publish" in me["scopes"]
        space = await call(client, "publish", content={
            "kind": "discussion", "title": "From the README", "body": {"text": "pasted config"},
            "links": [], "previous": ""})
        found = await call(client, "search", q="pasted", kind="discussion")
        assert [i["id"] for i in found["items"]] == [space["id"]]
    assert not (tour / "nowhere").exists()
    assert (tour / "alexandria-alice" / "published" / f"{space['id']}.json").exists()


async def test_reading_needs_no_login(lib: Library, tour: Path, tmp_path: Path) -> None:
    params = server_params(tour, lib.url)
    empty = tmp_path / "empty-home"
    no_login = StdioServerParameters(
        command=params.command, args=[*params.args, "--genesis-pin", lib.pin],
        env={"ALEXANDRIA_HOME": str(empty)})
    async with connected(params) as alice:
        claim = await call(alice, "publish", content={
            "kind": "claim", "title": "Readable without a login", "links": [], "previous": "",
            "body": {"statement": "Reading needs no key", "scope": "reads",
                     "assumptions": []}})
    async with connected(no_login) as reader:
        me = await call(reader, "whoami")
        assert me["logged_in"] is False and me["pinned_by"] == "argument"
        assert me["login"] == f"alexandria login {lib.url} --genesis {lib.pin}"
        got = await call(reader, "verify", revision=claim["id"])
        assert got["verified"] is True
        for tool, args in (("publish", {"content": {"kind": "discussion", "title": "x",
                                                     "body": {"text": "y"}}}),
                           ("validate", {"content": {"kind": "discussion", "title": "x",
                                                      "body": {"text": "y"}}}),
                           ("follow", {"revisions": [claim["id"]]}), ("lists", {})):
            refused = await refusal(reader, tool, **args)
            assert refused["code"] == "NOT_LOGGED_IN", (tool, refused)
            assert refused["details"]["login"] == me["login"]
            assert "alexandria login" in refused["error"]
    assert not empty.exists()  # reading wrote nothing into the home


def _mcp(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``alexandria mcp`` with its stdin closed at once: it starts, then ends."""
    return subprocess.run([*CLI, "mcp", *args], input="", capture_output=True, text=True,
                          env=cli_env(home), cwd=ROOT, timeout=120)


def test_trust_on_first_use_and_setup_errors(lib: Library, tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = _mcp("--library", lib.url, home=home)
    assert first.returncode == 0, first.stderr
    assert f"pinned genesis {lib.pin}" in first.stderr and "trust on first use" in first.stderr
    assert first.stdout == ""
    nothing = _mcp(home=home)
    assert nothing.returncode == 7, nothing.stderr
    assert "alexandria login URL" in nothing.stderr and "--library URL" in nothing.stderr
    wrong = _mcp("--library", lib.url, "--genesis-pin", "ab" * 32, home=home)
    assert wrong.returncode != 0 and "no library configured" not in wrong.stderr
    assert "ab" * 32 in wrong.stderr or "pin" in wrong.stderr.lower()
    dead = _mcp("--library", f"http://127.0.0.1:{free_port()}", home=home)
    assert dead.returncode != 0 and "no library configured" not in dead.stderr
    assert not home.exists()


async def test_publish_is_idempotent_and_refuses_duplicates(lib: Library, tour: Path) -> None:
    content = {"kind": "discussion", "title": "Once only", "body": {"text": "no duplicates"},
               "links": [], "previous": ""}
    async with connected(server_params(tour, lib.url)) as client:
        first = await call(client, "publish", content=content, idempotency_key="plan-1:step-1")
        again = await call(client, "publish", content=content, idempotency_key="plan-1:step-1")
        assert again["id"] == first["id"] and again["entry"] == first["entry"]
        assert again["idempotent_replay"] is True and again["created"] is True
        reused = await refusal(client, "publish", content={**content, "title": "Other"},
                               idempotency_key="plan-1:step-1")
        assert reused["code"] == "IDEMPOTENCY_KEY_REUSED"
        assert reused["details"]["revision"] == first["id"]
        duplicate = await refusal(client, "publish", content=content)
        assert duplicate["code"] == "DUPLICATE_CONTRIBUTION"
        assert duplicate["details"]["existing"] == first["id"]
        assert duplicate["details"]["state"] == "published"
        checked = await call(client, "validate", content=content)
        assert checked["duplicate_of"] == first["id"]
        second = await call(client, "publish", content=content, allow_duplicate=True)
        assert second["id"] != first["id"] and second["created"] is True
    home = tour / "alexandria-alice"
    published = [orjson.loads(p.read_bytes())["record"]["title"]
                 for p in (home / "published").glob("*.json")]
    assert published.count("Once only") == 2  # the first, and the one allowed on purpose


async def test_answers_a_text_only_client_can_act_on(lib: Library, tour: Path) -> None:
    async with connected(server_params(tour, lib.url)) as client:
        listed = await client.list_tools()
        body = orjson.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True)
                             for t in listed.tools])
        sizes = {t.name: len(orjson.dumps(t.model_dump(mode="json", by_alias=True,
                                                         exclude_none=True)))
                 for t in listed.tools}
        assert len(body) <= 12 * 1024, (len(body), sizes)
        tools = {t.name: t for t in listed.tools}
        assert "  " not in body.decode()
        for name in ("validate", "publish"):  # the schema per kind is shared, not repeated
            assert "allOf" not in orjson.dumps(tools[name].input_schema).decode()
        description = tools["publish"].description or ""
        assert "votes_on" not in description or "vote" in description
        assert "evidence_for(claim)" in description  # the contract's own words, at runtime
        shared = orjson.loads((await client.read_resource(
            "alexandria://write-schema")).contents[0].text)
        assert shared["content_schema"]["allOf"]

        long_text = " ".join(f"word{i}" for i in range(400))
        disc = await call(client, "publish", content={
            "kind": "discussion", "title": "Long text for snippets", "links": [],
            "previous": "", "body": {"text": long_text}})
        reply = await call(client, "publish", content={
            "kind": "reply", "title": "A reply", "body": long_text, "previous": "",
            "links": [{"relation": "replies_to", "target": disc["id"]}]})
        disc_author = (await call(client, "get", revision=disc["id"]))["item"]["author"]
        found = await client.call_tool("search", {"q": "snippets", "detail": "summary"})
        item = text_json(found)["items"][0]
        snippet = item["untrusted"]["snippet"]
        assert snippet.startswith("word0 word1") and snippet.endswith("…")
        assert "{" not in snippet and '"' not in snippet
        assert re.fullmatch(r"(word\d+ )*word\d+…", snippet), snippet
        assert found.content[0].text.startswith("search: 1 item;")
        hinted = await call(client, "search", q="snippets", projection="summary")
        hint = hinted["items"][0]["untrusted"]["snippet"]
        assert hint.startswith("word0 word1") and "{" not in hint and '"' not in hint

        calls: list[tuple[str, dict[str, Any], str]] = [
            ("search", {"q": "word1"}, "items"),
            ("get", {"revision": reply["id"]}, "item"),
            ("object", {"revision": disc["id"], "section": "all"}, "item"),
            ("connections", {"revision": disc["id"]}, "history"),
            ("discussion", {"revision": disc["id"], "detail": "full"}, "items"),
            ("changes", {"root": disc["id"]}, "items"),
            ("verify", {"revision": reply["id"], "detail": "full"}, "id"),
            ("lists", {}, "items"),
            ("scores", {"author": disc_author}, "author"),
        ]
        for tool, args, key in calls:
            for max_bytes in (1024, 4096):
                result = await client.call_tool(tool, {**args, "max_bytes": max_bytes})
                assert not result.is_error, (tool, result.structured_content)
                assert answer_bytes(result) <= max_bytes, (tool, max_bytes)
                data = text_json(result)
                assert data == result.structured_content
                assert "  " not in result.content[0].text
                assert re.search(r"\b1 (items|votes|revisions)\b",
                                 result.content[0].text) is None
                if tool != "lists":
                    assert re.search(r"[0-9a-f]{64}", orjson.dumps(data[key]).decode()), (
                        tool, max_bytes, data)


async def test_the_text_block_over_http(lib: Library, tour: Path) -> None:
    async with connected(server_params(tour, lib.url)) as client:
        made = await call(client, "publish", content={
            "kind": "discussion", "title": "Read over HTTP", "body": {"text": "over /mcp"},
            "links": [], "previous": ""}, allow_duplicate=True)
        space = {"items": [made]}
    async with Client(f"{lib.url}/mcp") as remote:
        listed = await remote.list_tools()
        assert len(orjson.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True)
                                 for t in listed.tools])) <= 12 * 1024
        rev = space["items"][0]["id"]
        for tool, args, key in (("search", {"q": "mcp"}, "items"), ("get", {"revision": rev},
                                                                     "item"),
                                ("object", {"revision": rev}, "item"),
                                ("connections", {"revision": rev}, "history"),
                                ("discussion", {"revision": rev}, "items"),
                                ("changes", {"root": rev}, "items"),
                                ("verify", {"revision": rev, "detail": "full"}, "id")):
            result = await remote.call_tool(tool, {**args, "max_bytes": 1024})
            assert not result.is_error, (tool, result.structured_content)
            assert answer_bytes(result) <= 1024, tool
            data = text_json(result)
            assert data == result.structured_content
            if tool != "discussion":  # a discussion with no replies yet
                assert rev in orjson.dumps(data[key]).decode(), (tool, data)


async def test_a_repeat_after_an_uncertain_answer_resends_the_same_envelope(
        lib: Library, tour: Path) -> None:
    home = tour / "alexandria-alice"
    online_params = server_params(tour, lib.url)
    offline_params = StdioServerParameters(
        command=online_params.command, env=online_params.env,
        args=["mcp", "--library", f"http://127.0.0.1:{free_port()}"])  # nothing listens
    content = {"kind": "discussion", "title": "Offline, then once", "body": {"text": "kept"},
               "links": [], "previous": ""}
    async with connected(offline_params) as offline:
        kept = await refusal(offline, "publish", content=content, idempotency_key="offline-1")
        assert kept["code"] == "CONNECTION_FAILED"
        rev = kept["details"]["pending"]
        again = await refusal(offline, "publish", content=content, idempotency_key="offline-1")
        assert again["code"] == "CONNECTION_FAILED" and again["details"]["pending"] == rev
        duplicate = await refusal(offline, "publish", content=content)
        assert duplicate["code"] == "DUPLICATE_CONTRIBUTION"
        assert duplicate["details"]["state"] == "pending"
        assert duplicate["details"]["retry"] == {"retry": rev}
    envelope = (home / "pending" / f"{rev}.json").read_bytes()
    titles = [orjson.loads(p.read_bytes())["record"]["title"]
              for p in (home / "pending").glob("*.json")]
    assert titles.count(content["title"]) == 1  # one envelope, signed once
    async with connected(online_params) as online:
        first = await call(online, "publish", content=content, idempotency_key="offline-1")
        assert first["id"] == rev and first["created"] is True
        replay = await call(online, "publish", content=content, idempotency_key="offline-1")
        assert replay["id"] == rev and replay["idempotent_replay"] is True
        dangling = {"kind": "reply", "title": "Dangling", "body": "to nothing", "previous": "",
                    "links": [{"relation": "replies_to", "target": "1" * 64}]}
        refused = await refusal(online, "publish", content=dangling, idempotency_key="bad-1")
        assert refused["code"] == "LINK_TARGET_MISSING"
        repeated = await refusal(online, "publish", content=dangling, idempotency_key="bad-1")
        assert repeated["code"] == "LINK_TARGET_MISSING"
        assert repeated["details"]["idempotent_replay"] is True
    stored = orjson.loads((home / "published" / f"{rev}.json").read_bytes())
    assert stored["record"] == orjson.loads(envelope)["record"]  # the same bytes, re-sent
    assert not (home / "pending" / f"{rev}.json").exists()
    # a server stopped between the library's answer and remembering it: the key still
    # answers with that revision, found in published/, never a second entry
    keys_file = home / "mcp-idempotency.json"
    keys = orjson.loads(keys_file.read_bytes())
    del keys["offline-1"]["outcome"]
    keys_file.write_bytes(orjson.dumps(keys))
    async with connected(online_params) as restarted:
        again_online = await call(restarted, "publish", content=content,
                                  idempotency_key="offline-1")
        assert again_online["id"] == rev and again_online["created"] is False


async def test_after_the_tour_itself(tmp_path: Path) -> None:
    """`alexandria demo` and the README's tour pasted into bash, as ``tests/cli/test_readme.py``
    runs them; then the README's MCP configuration, filled in for that directory and port."""
    with tour_after_demo(tmp_path, link_venv=True) as (port, _tour):
        async with connected(server_params(tmp_path, f"http://127.0.0.1:{port}")) as client:
            me = await call(client, "whoami")
            assert me["logged_in"] is True, me
            found = await call(client, "search", q="successor", kind="discussion")
            assert found["items"], found
            assert "successor" in found["items"][0]["untrusted"]["title"]


def test_the_readme_names_what_the_client_does_not_pass() -> None:
    text = README.read_text()
    assert "only a few environment variables" in text
    entry = readme_config()["mcpServers"]["alexandria"]
    assert entry["env"]["ALEXANDRIA_HOME"].endswith("/alexandria-alice")
    assert "--library" in entry["args"] and os.path.isabs(entry["command"])
