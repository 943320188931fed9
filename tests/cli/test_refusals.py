"""Refusals that name the fix, and no silent duplicates, as a participant meets them through
the real command line against a live library: a duplicate publish is refused (naming the
revision or the pending envelope) unless ``--allow-duplicate``; ``--name`` rebinding warns;
``pending --drop``; link refusals list what the kind takes, from the same table the rules
enforce; another author's object points to a proposal; ``revise`` checks before the editor,
needs a terminal for ``vi`` and leaves no temporary file; and the CLI's edges: ``verify``'s
defaults and ``--library``, no did-you-mean for a valid option, library URLs with ``/api`` or
another path, both pins at login, names in completion.  One server for the module."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alexandria.core.records import PUBLIC_KINDS
from alexandria.rules.state import RELATIONS, allowed_links
from tests.support.cli import Library, cli, cli_json, write_content
from tests.support.liveserver import NewDb

pytestmark = pytest.mark.slow

SPACE = {"kind": "space", "title": "Refusals", "body": {"summary": "for the refusal tests"}}


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb) -> Iterator[Library]:
    base = tmp_path_factory.mktemp("refusals")
    library = Library.create(base, module_db(base / "library.db"))
    library.stop()  # served again with the log key `authority issue --roles log` made: verify
    library.start()  # needs signed checkpoints
    for who in ("owner", "peer"):
        library.participant(who)
    cli("publish", str(write_content(base / "space.json", SPACE)), "--name", "space",
        home=library.homes["owner"])
    claim = {"kind": "claim", "title": "Two and two",
             "body": {"statement": "2 + 2 = 4", "scope": "naturals", "assumptions": []},
             "links": [{"relation": "contained_in", "target": "$space"}]}
    cli("publish", str(write_content(base / "claim.json", claim)), "--name", "claim",
        home=library.homes["owner"])
    yield library
    library.stop()


def _reply_to(target: str, text: str) -> dict[str, Any]:
    return {"kind": "discussion", "title": text, "body": {"text": text},
            "links": [{"relation": "contained_in", "target": target}]}


def _pending(home: Path) -> list[str]:
    folder = home / "pending"
    return sorted(p.name[:-5] for p in folder.glob("*.json")
                  if not p.name.endswith(".meta.json")) if folder.is_dir() else []


# --- duplicates ---------------------------------------------------------------------------------


def test_publishing_the_same_content_twice_is_refused_naming_the_first(
        lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    space = cli_json("get", "space", home=home)["id"]
    path = write_content(tmp_path / "d.json", _reply_to(space, "Once only"))
    first = cli("publish", str(path), home=home).stdout.strip()
    r = cli("publish", str(path), home=home, expect=4)
    assert "[DUPLICATE_CONTRIBUTION]" in r.stderr and first in r.stderr
    assert "--allow-duplicate" in r.stderr and r.stdout == ""
    index = home / "content-index"
    assert first in index.read_text()
    index.unlink()  # the index is a hint: without it the home is scanned, and it is rewritten
    doc = json.loads(cli("--json", "publish", str(path), home=home, expect=4).stdout)
    assert doc["code"] == "DUPLICATE_CONTRIBUTION" and doc["details"]["revision"] == first
    assert first in index.read_text() and _pending(home) == []
    # the same content under another title is not a duplicate; --allow-duplicate publishes it
    other = write_content(tmp_path / "e.json", {**_reply_to(space, "Once only"), "title": "B"})
    cli("publish", str(other), home=home)
    second = cli("publish", str(path), "--allow-duplicate", home=home).stdout.strip()
    assert second != first and len(second) == 64


def test_a_batch_refuses_duplicates_in_place_and_goes_on(lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    space = cli_json("get", "space", home=home)["id"]
    line = _reply_to(space, "Batch twin")
    jsonl = tmp_path / "twins.jsonl"
    jsonl.write_text("".join(json.dumps(x) + "\n" for x in
                             (line, line, _reply_to(space, "Batch other"))))
    r = cli("--json", "publish", "--jsonl", str(jsonl), home=home, expect=3)
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["status"] for x in results] == ["admitted", "refused", "admitted"]
    assert results[1]["error"]["code"] == "DUPLICATE_CONTRIBUTION"
    assert results[1]["error"]["details"]["pending"] == results[0]["id"]


def test_offline_duplicates_are_refused_and_a_pending_envelope_can_be_dropped(
        lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    space = cli_json("get", "space", home=home)["id"]
    path = write_content(tmp_path / "offline.json", _reply_to(space, "Written offline"))
    lib.stop()
    try:
        cli("publish", str(path), home=home, expect=5)
        [kept] = _pending(home)
        r = cli("--json", "publish", str(path), home=home, expect=4)
        doc = json.loads(r.stdout)
        assert doc["code"] == "DUPLICATE_CONTRIBUTION" and doc["details"]["pending"] == kept
        assert f"alexandria pending --drop {kept}" in r.stderr
        assert _pending(home) == [kept]  # retry would send one envelope, not two
        r = cli("pending", "--drop", "f" * 64, home=home, expect=1)
        assert "[NOT_PENDING]" in r.stderr and _pending(home) == [kept]
        r = cli("pending", "--drop", kept, home=home)
        assert r.stdout.strip() == kept and "dropped discussion “Written offline”" in r.stderr
        assert _pending(home) == []
        cli("publish", str(path), home=home, expect=5)  # dropped: no longer a duplicate
        [again] = _pending(home)
        doc = cli_json("pending", "--drop", again, home=home)
        assert doc["dropped"][0]["id"] == again and doc["dropped"][0]["title"] == "Written offline"
    finally:
        lib.start()
    assert json.loads(cli("--json", "retry", home=home).stdout) == {"results": []}


def test_rebinding_a_name_warns_with_the_old_and_new_target(lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    space = cli_json("get", "space", home=home)["id"]
    a = cli("publish", str(write_content(tmp_path / "a.json", _reply_to(space, "First A"))),
            "--name", "rebound", home=home)
    assert "warning" not in a.stderr
    b = cli("publish", str(write_content(tmp_path / "b.json", _reply_to(space, "Then B"))),
            "--name", "rebound", home=home)
    old, new = a.stdout.strip(), b.stdout.strip()
    assert f"warning: --name rebound named {old}; it now names {new}" in b.stderr
    assert cli_json("get", "rebound", home=home)["id"] == new


# --- refusals that name the fix ------------------------------------------------------------------


def test_allowed_links_are_derived_from_the_rule_table() -> None:
    for kind in PUBLIC_KINDS:
        allowed = allowed_links(kind)
        assert {e["relation"] for e in allowed["relations"]} == {
            rel for rel, rule in RELATIONS.items() if kind in rule.used_by}
    vote = allowed_links("vote")
    assert vote["relations"] == [{"relation": "votes_on", "targets": vote["relations"][0]
                                  ["targets"], "count": "exactly 1"}]
    assert "vote" not in vote["relations"][0]["targets"] and vote["citations"] is False
    assert allowed_links("discussion")["citations"] is True


def test_a_relation_refusal_lists_what_the_kind_takes(lib: Library) -> None:
    home = lib.homes["owner"]
    claim = cli_json("get", "claim", home=home)["id"]
    vote = {"kind": "vote", "title": "Useful", "body": "1",
            "links": [{"relation": "about", "target": claim}]}
    r = cli("--json", "publish", "-", home=home, stdin=json.dumps(vote), expect=3)
    doc = json.loads(r.stdout)
    assert doc["code"] == "RELATION_NOT_ALLOWED"
    assert doc["details"]["allowed"] == allowed_links("vote")
    assert doc["details"]["used_by"] == ["discussion"]
    assert "only discussions use about; a vote takes votes_on" in doc["error"]
    assert "allowed:" in r.stderr and "votes_on (exactly 1" in r.stderr
    # too many links of a kind: the counts come with the refusal
    space = cli_json("get", "space", home=home)["id"]
    twice = {**_reply_to(space, "Twice contained"),
             "links": [{"relation": "contained_in", "target": space}] * 2}
    doc = json.loads(cli("--json", "publish", "-", home=home, stdin=json.dumps(twice),
                         expect=3).stdout)
    assert doc["code"] == "TOO_MANY_LINKS"
    assert {"relation": "contained_in", "targets": ["space"], "count": "at most 1"} in \
        doc["details"]["allowed"]["relations"]


def test_another_authors_object_points_to_a_proposal(lib: Library, tmp_path: Path) -> None:
    owner, peer = lib.homes["owner"], lib.homes["peer"]
    head = cli_json("get", "claim", "--head", home=owner)["id"]
    names = tmp_path / "names"
    names.write_text(f"claim {head}\n")
    change = {"kind": "claim", "title": "Two and two, again",
              "body": {"statement": "2+2=4", "scope": "naturals", "assumptions": []},
              "links": [{"relation": "contained_in",
                         "target": cli_json("get", "space", home=owner)["id"]}],
              "previous": head}
    r = cli("--json", "publish", "-", home=peer, stdin=json.dumps(change), expect=3)
    doc = json.loads(r.stdout)
    assert doc["code"] == "NOT_ORIGINAL_AUTHOR"
    assert doc["details"]["head"] == head and doc["details"]["next"].startswith("alexandria")
    assert doc["details"]["proposal"]["links"] == [{"relation": "proposes_for", "target": head}]
    assert "publish a proposal with proposes_for" in doc["error"]
    assert "correct the content and publish anew" not in r.stderr
    assert "next: `alexandria publish proposal.json`" in r.stderr
    # revise says so before any editor opens (the editor would fail the test)
    marker = tmp_path / "editor-ran"
    r = cli("revise", "claim", "--names", str(names), home=peer, expect=3,
            env={"EDITOR": f"touch {marker}"})
    assert "[NOT_ORIGINAL_AUTHOR]" in r.stderr and "proposes_for" in r.stderr
    assert not marker.exists()


def test_a_conflict_names_the_current_head(lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    space = cli_json("get", "space", home=home)["id"]
    first = cli("publish", str(write_content(tmp_path / "c.json", _reply_to(space, "Head v1"))),
                home=home).stdout.strip()
    v2 = {**_reply_to(space, "Head v2"), "previous": first}
    head = cli("publish", "-", home=home, stdin=json.dumps(v2)).stdout.strip()
    stale = {**_reply_to(space, "Head v2 stale"), "previous": first}
    doc = json.loads(cli("--json", "publish", "-", home=home, stdin=json.dumps(stale),
                         expect=4).stdout)
    assert doc["code"] == "HEAD_CONFLICT" and doc["details"]["head"] == head


# --- revise -----------------------------------------------------------------------------------


def _revise_temps() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("alexandria-revise-")}


def test_revise_without_a_terminal_or_an_editor_says_how_else(lib: Library) -> None:
    home = lib.homes["owner"]
    r = cli("revise", "claim", home=home, expect=2, env={"VISUAL": "", "EDITOR": ""})
    assert "[EDITOR_NEEDS_TERMINAL]" in r.stderr and "--print" in r.stderr
    assert cli("revise", "claim", "--print", home=home).stdout.startswith("{")


def test_revise_refuses_an_immutable_kind_before_the_editor(lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    claim = cli_json("get", "claim", "--head", home=home)["id"]
    evidence = {"kind": "evidence", "title": "Counted", "body": {
        "claim": claim, "method": "example", "content": "counted on fingers", "sources": []},
        "links": [{"relation": "evidence_for", "target": claim}]}
    ev = cli("publish", "-", home=home, stdin=json.dumps(evidence)).stdout.strip()
    marker = tmp_path / "editor-ran"
    r = cli("revise", ev, home=home, expect=3, env={"EDITOR": f"touch {marker}"})
    assert "[IMMUTABLE]" in r.stderr and not marker.exists()


def test_a_failing_editor_leaves_no_temporary_file(lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    before = _revise_temps()
    r = cli("revise", "claim", home=home, expect=1, env={"EDITOR": "false"})
    assert "[EDITOR_FAILED]" in r.stderr and "nothing was published" in r.stderr
    r = cli("revise", "claim", home=home, expect=1,
            env={"EDITOR": str(tmp_path / "no-such-editor")})
    assert "[EDITOR_FAILED]" in r.stderr
    assert _revise_temps() == before and _pending(home) == []


# --- CLI edges --------------------------------------------------------------------------------


def test_verify_defaults_to_the_homes_library_and_pin_and_resolves_names(lib: Library) -> None:
    home = lib.homes["owner"]
    r = cli("verify", home=home)
    assert f"genesis pin of your config home: {lib.pin}" in r.stderr
    assert "every signature" in r.stdout
    claim = cli_json("get", "claim", home=home)["id"]
    r = cli("verify", "--entry", "claim", "--library", lib.url, home=home)
    assert r.stdout.startswith(f"{claim} verified")
    assert "did you mean" not in r.stderr
    r = cli("verify", "--url", lib.url, "--genesis-pin", lib.pin, home=home)  # the old spelling
    assert "every signature" in r.stdout
    help_text = cli("verify", "--help").stdout
    assert "--library URL" in help_text and "--url" not in help_text
    r = cli("verify", "--library", "http://127.0.0.1:9", home=home, expect=1)
    assert "[GENESIS_PIN_REQUIRED]" in r.stderr
    r = cli("verify", "--entry", "nobody", home=home, expect=1)
    assert "[BAD_REVISION]" in r.stderr


def test_a_valid_option_of_another_command_gets_no_did_you_mean(lib: Library,
                                                                tmp_path: Path) -> None:
    r = cli("backup", "--db", str(tmp_path / "x.db"), str(tmp_path / "out.db"),
            "--library", lib.url, expect=2)
    assert "did you mean" not in r.stderr
    assert "--library is not an option of this command" in r.stderr
    assert "--library" not in cli("backup", "--help").stdout


def test_a_library_url_with_api_appended_is_the_library(lib: Library) -> None:
    for suffix in ("/api", "/api/"):
        r = cli("--json", "search", "Two", "--library", lib.url + suffix)
        assert json.loads(r.stdout)["items"], r.stdout


def test_a_wrong_pin_at_login_shows_both_pins(lib: Library, tmp_path: Path) -> None:
    wrong = "0" * 64
    r = cli("login", lib.url, "--genesis", wrong, "--no-wait", home=tmp_path / "home",
            expect=None)
    assert r.returncode != 0
    assert "[GENESIS_PIN_MISMATCH]" in r.stderr
    assert wrong in r.stderr and lib.pin in r.stderr


def test_completion_offers_the_names_of_the_names_file(lib: Library, tmp_path: Path) -> None:
    script = tmp_path / "alexandria.bash"
    script.write_text(cli("completion", "bash").stdout)
    home = lib.homes["owner"]

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        r = subprocess.run(
            ["bash", "-c", f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1};"
             " _shtab_alexandria; echo ${COMPREPLY[@]}"], capture_output=True, text=True,
            check=True,
            env={**os.environ, "ALEXANDRIA_HOME": str(home)})
        return r.stdout.split()

    assert complete("alexandria", "get", "cl") == ["claim"]
    assert complete("alexandria", "changes", "--root", "sp") == ["space"]
    assert complete("alexandria", "verify", "--entry", "cl") == ["claim"]
    assert "--head" in complete("alexandria", "get", "claim", "--he")
    fish = cli("completion", "fish").stdout
    assert "function __alexandria_names" in fish
    assert "_shtab_alexandria_using get; and test $_shtab_alexandria_npos -eq 0' -ka" \
        ' "(__alexandria_names)"' in fish
    zsh = cli("completion", "zsh").stdout
    assert "_alexandria_names() {" in zsh and '--root[root id or a name]:R:($(_alexandria_names))' \
        in zsh


def test_the_rule_table_names_the_contracts_relations() -> None:
    """The table is the write contract's relation rules as data: every relation the contract's
    ``state_rules`` and ``object_model`` name has a row, and every row but ``votes_on`` (which
    the contract's prose calls "votes target a non-vote root") is named there."""
    import re

    from alexandria.core.contract import contract

    doc = contract()
    prose = " ".join([*doc["write_contract"]["state_rules"],
                      *(v for v in doc["object_model"].values() if isinstance(v, str))])
    named = {rel for rel in RELATIONS if re.search(rf"\b{rel}\b", prose)}
    assert named == set(RELATIONS) - {"votes_on"}
    assert set(re.findall(r"\b([a-z]+_[a-z]+)\(", prose)) <= set(RELATIONS)


def test_a_library_url_with_a_wrong_path_says_so(lib: Library) -> None:
    r = cli("search", "Two", "--library", lib.url + "/library", expect=1)
    assert "[NOT_FOUND]" in r.stderr and "without /api or another path" in r.stderr
