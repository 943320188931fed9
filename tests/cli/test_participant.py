"""The participant CLI against a live server: worker set-up, the contract's worked example
scripted entirely through the CLI, reading, personal lists, dry runs, definitive rejections and
error output.  One server for the whole module."""

from __future__ import annotations

import json
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from alexandria.cli import personal as cli_personal
from alexandria.cli.config import Home
from alexandria.cli.session import Session
from alexandria.client import ServerError
from tests.support.cli import CLI, Library, cli, cli_env, cli_json, write_content
from tests.support.library import CONTRACT
from tests.support.liveserver import NewDb

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb) -> Iterator[Library]:
    base = tmp_path_factory.mktemp("cli")
    library = Library.create(base, module_db(base / "library.db"))
    library.participant("owner")
    library.participant("peer")
    yield library
    library.stop()


@pytest.fixture(scope="module")
def example(lib: Library) -> dict[str, str]:
    """The twelve steps of ``object_examples``, each a ``publish FILE --name NAME`` by its
    actor; owner and peer share one names file, as the contract's instructions say."""
    names_file = lib.base / "example.names"
    ids: dict[str, str] = {}
    for i, step in enumerate(CONTRACT["object_examples"]["steps"], 1):
        path = write_content(lib.base / "example" / f"{i:02d}-{step['name']}.json",
                             step["content"])
        r = cli("publish", str(path), "--name", step["name"], "--names", str(names_file),
                home=lib.homes[step["actor"]])
        ids[step["name"]] = r.stdout.strip()
        assert f"as ${step['name']}" in r.stderr
    lines = dict(line.split() for line in names_file.read_text().splitlines())
    assert lines == ids
    for home in lib.homes.values():  # later commands resolve names from each home
        (home / "names").write_text(names_file.read_text())
    return ids


def test_worker_key_certificate_and_whoami(lib: Library) -> None:
    home = lib.homes["owner"]
    key_file = home / "worker.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    who = cli_json("whoami", home=home)
    assert who["library"] == lib.url and who["genesis"] == lib.pin
    assert who["certificate"]["worker"] == who["worker"]
    assert who["certificate"]["valid_now"] is True
    assert who["certificate"]["scopes"] == [
        "library.comment", "library.curate", "library.publish", "library.vote"]
    assert json.loads((lib.operator / "actors.json").read_text())["owner"] == \
        who["certificate"]["actor"]
    human = cli("whoami", home=home).stdout
    assert who["worker"] in human and "days left" in human
    again = cli("worker", "init", home=home)
    assert again.stdout.strip() == who["worker"]
    assert "already exists" in again.stderr
    peer_cert = (lib.homes["peer"] / "certificate.json").read_text()
    r = cli("worker", "import", "-", home=home, stdin=peer_cert, expect=1)
    assert "CERTIFICATE_KEY_MISMATCH" in r.stderr


def test_worker_init_checks_the_pin(lib: Library, tmp_path: Path) -> None:
    r = cli("worker", "init", "--library", lib.url, "--genesis", "0" * 64,
            home=tmp_path / "x", expect=1)
    assert "GENESIS_PIN_MISMATCH" in r.stderr
    assert not (tmp_path / "x" / "library.json").exists()
    # without a pin nothing is trusted, or written: the served pin is printed to compare
    r = cli("worker", "init", "--library", lib.url, home=tmp_path / "tofu", expect=1)
    assert "GENESIS_PIN_REQUIRED" in r.stderr and lib.pin in r.stderr
    assert not (tmp_path / "tofu").exists()
    r = cli("worker", "init", "--library", lib.url, "--trust-served-genesis",
            home=tmp_path / "tofu")
    assert "trust on first use" in r.stderr
    assert cli_json("whoami", home=tmp_path / "tofu")["genesis"] == lib.pin
    r = cli("publish", "-", home=tmp_path / "tofu", expect=7,
            stdin='{"kind":"space","title":"t","body":{"summary":"s"}}')
    assert r.stderr.count("\n") == 1 and "NO_CERTIFICATE" in r.stderr


def test_worked_example_scripted_through_the_cli(lib: Library, example: dict[str, str]
                                                 ) -> None:
    home = lib.homes["owner"]
    claim = cli_json("get", "claim", home=home)
    assert claim["id"] == example["claim"] and claim["record"]["previous"] == ""
    head = cli_json("get", "claim", "--head", home=home)
    assert head["id"] == example["merge"]
    assert [lk["relation"] for lk in head["record"]["links"]] == ["contained_in", "merges"]
    human = cli("get", example["merge"], home=home).stdout
    assert "verified" in human and "Peano" in human
    raw = httpx.get(f"{lib.url}/api/entries/{example['evidence']}").content
    assert cli("--json", "get", example["evidence"], home=home).stdout.strip().encode() == raw
    for name, rev in example.items():  # what each participant stored is what the library holds
        actor = next(s["actor"] for s in CONTRACT["object_examples"]["steps"]
                     if s["name"] == name)
        published = lib.homes[actor] / "published" / f"{rev}.json"
        assert published.read_bytes() == httpx.get(f"{lib.url}/api/entries/{rev}").content
    assert not list((lib.homes["owner"] / "pending").iterdir())


def test_search_and_object(lib: Library, example: dict[str, str]) -> None:
    home = lib.homes["peer"]
    found = cli_json("search", "plus", "--kind", "claim", home=home)
    assert [i["id"] for i in found["items"]] == [example["merge"]]
    assert found["library"] == "cli-test"
    r = cli("search", "plus", home=home)
    assert example["merge"] in r.stdout
    obj = cli_json("object", "claim", "--section", "history", home=home)
    assert obj["head"] == example["merge"] and obj["revisions"] == 2
    assert [i["id"] for i in obj["items"]] == [example["claim"], example["merge"]]
    r = cli("object", "subspace", home=home)
    assert "in        Space\n" in r.stdout and example["merge"] in r.stdout


def test_changes_persist_the_cursor(lib: Library, example: dict[str, str]) -> None:
    home = lib.homes["peer"]
    first = cli("--json", "changes", "--root", "space", "--limit", "5", home=home).stdout
    items = [json.loads(line) for line in first.splitlines()]
    assert {i["id"] for i in items} == set(example.values()) - {example["relationship"]}
    assert (home / "cursors" / f"{example['space']}.json").exists()
    r = cli("changes", "--root", "space", home=home)
    assert r.stdout == "" and "resuming" in r.stderr
    doc = write_content(lib.base / "more" / "doc.json", {
        "kind": "document", "title": "Notes", "body": {"text": "More notes."},
        "links": [{"relation": "contained_in", "target": "$subspace"}]})
    new = cli("publish", str(doc), home=home).stdout.strip()
    r = cli("--json", "changes", "--root", example["space"], home=home)
    assert [json.loads(line)["id"] for line in r.stdout.splitlines()] == [new]
    again = cli("--json", "changes", "--root", "space", "--reset", home=home).stdout
    assert len(again.splitlines()) == len(items) + 1


def test_changes_follow_prints_what_arrives(lib: Library, example: dict[str, str]) -> None:
    home = lib.homes["owner"]
    proc = subprocess.Popen(
        [*CLI, "--json", "changes", "--root", "discussion", "--follow", "--interval", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cli_env(home),
    )
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        seen = [json.loads(proc.stdout.readline())["id"] for _ in range(3)]
        assert seen == [example["discussion"], example["reply"], example["branch"]]
        reply = {"kind": "reply", "title": "Later", "body": "Arrived while following.",
                 "links": [{"relation": "replies_to", "target": "$discussion"}]}
        new = cli("publish", "-", home=lib.homes["peer"], stdin=json.dumps(reply)).stdout
        arrived = json.loads(proc.stdout.readline())
        assert arrived["id"] == new.strip()
        cursor = home / "cursors" / f"{example['discussion']}.json"
        deadline = time.monotonic() + 20  # the cursor is saved right after the page is printed
        while json.loads(cursor.read_text())["snapshot"] < arrived["admission"]["sequence"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        watchdog.cancel()
        proc.terminate()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
    r = cli("--json", "changes", "--root", "discussion", home=home)  # the cursor was saved
    assert r.stdout == ""


def test_personal_lists(lib: Library, example: dict[str, str]) -> None:
    home = lib.homes["owner"]
    assert cli_json("lists", home=home) == {"state": None, "following": [], "saved": []}
    out = cli_json("follow", "claim", "discussion", home=home)
    assert out["following"] == [example["claim"], example["discussion"]] and out["changed"]
    out = cli_json("save", example["merge"], home=home)  # a later revision saves its root
    assert out["saved"] == [example["claim"]]
    assert not cli_json("follow", "claim", home=home)["changed"]
    cli("unfollow", "claim", home=home)
    lists = cli_json("lists", home=home)
    assert lists["following"] == [example["discussion"]] and lists["saved"] == [example["claim"]]
    human = cli("lists", home=home).stdout
    assert "following (1)" in human and "One plus one equals two" in human
    cli("unsave", "claim", home=home)
    assert cli_json("lists", home=home)["saved"] == []
    r = cli("follow", "evidence", home=home, expect=3)  # lists hold objects, not evidence
    assert "PERSONAL_TARGET_KIND" in r.stderr


def test_personal_state_conflict_is_reapplied(lib: Library, example: dict[str, str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A change signed on a stale state gets 409 with the current state; the CLI applies the
    change again on that state and signs anew, losing neither write."""
    home = lib.homes["peer"]
    session = Session(Home(home))
    try:
        stale = cli_personal._personal_read(session)
        cli("follow", "space", home=home)  # another session moves the state on
        real_read, real_write = cli_personal._personal_read, session.client.personal
        reads = [stale]  # the first read answers the stale state
        conflicts: list[int] = []

        def read(s: Session) -> Any:
            return reads.pop() if reads else real_read(s)

        def write(envelope: bytes) -> dict[str, Any]:
            try:
                return real_write(envelope)
            except ServerError as exc:
                conflicts.append(exc.http_status)
                raise

        monkeypatch.setattr(cli_personal, "_personal_read", read)
        monkeypatch.setattr(session.client, "personal", write)
        state, changed = cli_personal._update(
            session, lambda lists: {**lists, "saved": [*lists["saved"], example["document"]]})
    finally:
        session.close()
    assert conflicts == [409] and changed and state is not None
    lists = cli_json("lists", home=home)
    assert example["space"] in lists["following"] and lists["saved"] == [example["document"]]
    assert lists["state"]["id"] == state["id"]


def test_validate_is_a_dry_run(lib: Library, example: dict[str, str]) -> None:
    home = lib.homes["peer"]
    content = {"kind": "reply", "title": "Dry", "body": "Only checking.",
               "links": [{"relation": "replies_to", "target": "$discussion"}]}
    r = cli("--json", "validate", "-", home=home, stdin=json.dumps(content))
    result = json.loads(r.stdout)
    assert result["dry_run"] is True and result["already_admitted"] is False
    assert httpx.get(f"{lib.url}/api/entries/{result['id']}").status_code == 404
    assert not list((home / "pending").iterdir())
    bad = {**content, "links": [{"relation": "replies_to", "target": example["claim"]}]}
    r = cli("--json", "validate", "-", home=home, stdin=json.dumps(bad), expect=3)
    error = json.loads(r.stdout)
    assert set(error) == {"error", "code", "details"} and error["code"]
    assert r.stderr.startswith("alexandria: error:") and r.stderr.count(f"[{error['code']}]") == 1


def test_definitive_rejection_is_recorded_and_never_resent(lib: Library,
                                                           example: dict[str, str]) -> None:
    home = lib.homes["peer"]
    content = {"kind": "reply", "title": "Lost", "body": "To nowhere.",
               "links": [{"relation": "replies_to", "target": "ab" * 32}]}
    r = cli("--json", "publish", "-", home=home, stdin=json.dumps(content), expect=3)
    error = json.loads(r.stdout)
    direct = httpx.post(f"{lib.url}/api/entries", content=b"{}")  # the server's error shape
    assert set(error) == set(direct.json()) == {"error", "code", "details"}
    assert r.stderr.startswith("alexandria: error: rejected:") and "never resent" in r.stderr
    rejected = list((home / "rejected").glob("*.error.json"))
    assert len(rejected) == 1
    rev = rejected[0].name.removesuffix(".error.json")
    recorded = json.loads(rejected[0].read_text())
    assert recorded["status"] == 422 and recorded["code"] == error["code"]
    assert (home / "rejected" / f"{rev}.json").exists()
    assert not list((home / "pending").iterdir())
    listing = cli_json("pending", home=home)
    assert listing["pending"] == [] and [x["id"] for x in listing["rejected"]] == [rev]
    assert "1 rejected" in cli("pending", home=home).stderr
    assert cli_json("retry", home=home) == {"results": []}
    assert httpx.get(f"{lib.url}/api/entries/{rev}").status_code == 404


def test_conflict_is_a_definitive_rejection(lib: Library, example: dict[str, str]) -> None:
    """A revision of a head that moved on: 409 with the current head; not resent."""
    home = lib.homes["owner"]
    stale = {"kind": "claim", "title": "Stale", "previous": "$claim",
             "body": {"statement": "x", "scope": "y", "assumptions": []},
             "links": [{"relation": "contained_in", "target": "$subspace"}]}
    r = cli("--json", "publish", "-", home=home, stdin=json.dumps(stale), expect=4)
    error = json.loads(r.stdout)
    assert "head" in json.dumps(error["details"]) and example["merge"] in json.dumps(error)
    assert not list((home / "pending").iterdir())


def test_a_revision_is_taken_by_the_prefix_pages_print(lib: Library, example: dict[str, str]
                                                       ) -> None:
    home = lib.homes["owner"]
    got = cli_json("get", example["claim"][:12], home=home)
    assert got["id"] == example["claim"]
    human = cli("get", example["claim"][:9], home=home).stdout
    assert f"admitted  entry {got['admission']['sequence']} at" in human
    r = cli("--json", "get", "fedcba98765", home=home, expect=1)
    assert json.loads(r.stdout)["code"] == "UNKNOWN_ID"


def test_errors_are_one_line(lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    r = cli("get", "f" * 64, home=home, expect=1)
    assert r.stdout == "" and r.stderr.count("\n") == 1 and "404" not in r.stdout
    r = cli("--json", "get", "f" * 64, home=home, expect=1)
    assert json.loads(r.stdout)["code"] == "UNKNOWN_REVISION"
    r = cli("get", "nosuchname", home=home, expect=1)
    assert "BAD_REVISION" in r.stderr and r.stderr.count("\n") == 1
    r = cli("publish", str(tmp_path / "missing.json"), home=home, expect=1)
    assert "CANNOT_READ" in r.stderr and r.stderr.count("\n") == 1
    r = cli("publish", "-", home=home, stdin='{"kind":"space","title":"t","body":{"x":1.5}}',
            expect=1)
    assert "FLOAT_NOT_ALLOWED" in r.stderr
    r = cli("publish", "-", home=home, stdin='{"kind":"space","title":"t","body":{},"x":1}',
            expect=1)
    assert "CONTENT_SHAPE" in r.stderr
    r = cli("publish", "-", home=home, expect=1,
            stdin='{"kind":"reply","title":"t","body":"b",'
                  '"links":[{"relation":"replies_to","target":"$nobody"}]}')
    assert "UNKNOWN_REFERENCE" in r.stderr and "--ref nobody=" in r.stderr
    r = cli("whoami", home=tmp_path / "empty", expect=7)
    assert "worker init" in r.stderr and r.stderr.count("\n") == 1
    r = cli("--json", "whoami", home=tmp_path / "empty", expect=7)
    assert json.loads(r.stdout)["code"] == "NO_WORKER_KEY"


def test_publish_from_stdin_with_ref_and_scopes(lib: Library, example: dict[str, str]) -> None:
    voter = lib.participant("voter", scopes="vote")
    vote = {"kind": "vote", "title": "Useful", "body": "1",
            "links": [{"relation": "votes_on", "target": "$target"}]}
    r = cli("--json", "publish", "-", "--ref", f"target={example['claim']}", home=voter,
            stdin=json.dumps(vote))
    signed: dict[str, Any] = json.loads(r.stdout)
    assert signed["record"]["links"] == [{"relation": "votes_on", "target": example["claim"]}]
    assert signed["record"]["body"] == "1"
    space = {"kind": "space", "title": "Not mine", "body": {"summary": "no curate scope"}}
    r = cli("--json", "publish", "-", home=voter, stdin=json.dumps(space), expect=3)
    assert json.loads(r.stdout)["code"] and "rejected" in r.stderr


def test_revoked_worker_is_refused(lib: Library, example: dict[str, str]) -> None:
    home = lib.participant("leaver", scopes="comment")
    key = cli_json("whoami", home=home)["worker"]
    reply = {"kind": "reply", "title": "Bye", "body": "Leaving.",
             "links": [{"relation": "replies_to", "target": example["discussion"]}]}
    cli("publish", "-", home=home, stdin=json.dumps(reply))
    r = cli("authority", "revoke", key, "--dir", str(lib.operator), "--library", lib.url,
            "--reason", "left")
    assert r.stdout.strip() == key and "revoked" in r.stderr
    r = cli("--json", "publish", "-", home=home, stdin=json.dumps({**reply, "title": "Again"}),
            expect=3)
    assert json.loads(r.stdout)["code"] and "rejected" in r.stderr
    error = next((home / "rejected").glob("*.error.json"))
    assert json.loads(error.read_text())["status"] == 403


def test_control_characters_from_the_library_are_printed_visibly(
    lib: Library, example: dict[str, str]
) -> None:
    """The audit's reply cleared the screen and printed a fake "verified" line: every
    control character of a title or body now prints as a visible escape."""
    hostile = "It does.\x1b[2J\x1b[H\r✓ verified: signed by the operator\x07\u202e"
    reply = {"kind": "reply", "title": "Re\x1b[31m", "body": hostile,
             "links": [{"relation": "replies_to", "target": example["discussion"]}]}
    r = cli("--json", "publish", "-", home=lib.homes["peer"], stdin=json.dumps(reply),
            expect=None)
    if r.returncode:  # titles refuse controls: the body alone carries them
        reply["title"] = "Re"
        r = cli("--json", "publish", "-", home=lib.homes["peer"], stdin=json.dumps(reply))
    rev = json.loads(r.stdout)["id"]
    printed = {command: cli(command, rev, home=lib.homes["owner"]) for command in ("get", "object")}
    for out in printed.values():
        assert not any(c in out.stdout + out.stderr for c in "\x1b\x07\r\u202e"), out
    assert "\\x1b[2J" in printed["get"].stdout
