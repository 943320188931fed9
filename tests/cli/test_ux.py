"""Issue 18, "a CLI that people enjoy", checked as a user meets it: subprocesses of the real
command line against a live library on 127.0.0.1.  Start-up imports, batch publishing, exit
statuses, errors that say what to do, checks before signing, reading without a key, revise,
completion, quiet broken pipes.  One server for the module."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from alexandria.cli.publish import CHUNK, chunk_sizes
from tests.support.cli import CLI, ROOT, Library, cli, cli_env, cli_json, write_content
from tests.support.liveserver import NewDb, free_port, stop_group
from tests.support.ops import log_size

pytestmark = pytest.mark.slow

SPACE = {"kind": "space", "title": "UX", "body": {"summary": "for the CLI tests"}}


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb) -> Iterator[Library]:
    base = tmp_path_factory.mktemp("ux")
    library = Library.create(base, module_db(base / "library.db"))
    home = library.participant("owner")
    path = write_content(library.base / "space.json", SPACE)
    cli("publish", str(path), "--name", "space", home=home)
    thread = {"kind": "discussion", "title": "Thread", "body": {"text": "replies go here"},
              "links": [{"relation": "contained_in", "target": "$space"}]}
    cli("publish", str(write_content(library.base / "thread.json", thread)), "--name",
        "thread", home=home)
    yield library
    library.stop()


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


_LOADED = """
import sys
import threading
from alexandria.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("\\n".join(sorted(sys.modules)), file=sys.stderr)
"""


def _imports(*args: str, home: Path | None = None) -> set[str]:
    """The modules loaded once ``alexandria ARGS`` has run."""
    r = subprocess.run([sys.executable, "-c", _LOADED, *args], capture_output=True, text=True,
                       env=cli_env(home), cwd=ROOT, timeout=60)
    return set(r.stderr.split())


def _reply(i: int | str, target: str = "$thread") -> dict[str, Any]:
    return {"kind": "reply", "title": f"Reply {i}", "body": f"reply number {i}",
            "links": [{"relation": "replies_to", "target": target}]}


# --- speed: what a command imports ---------------------------------------------------------


def test_version_and_help_import_no_command_module() -> None:
    for args in (("--version",), ("--help",)):
        modules = _imports(*args)
        assert not {m for m in modules if m.startswith("alexandria.cli.")} - {
            "alexandria.cli.command_table", "alexandria.cli.parser"}, args
        assert "httpx" not in modules and "cryptography" not in modules
    # --version: nothing but the package and its command table, not even argparse or typing
    assert not {"alexandria.cli.parser", "argparse", "typing"} & _imports("--version")


def test_one_publish_imports_what_it_needs_and_no_more(lib: Library, tmp_path: Path) -> None:
    """Sign, check, send: the command's module and what it imports, the HTTP client among
    them; no web module, no other command's module (only the dispatched command is
    imported)."""
    path = write_content(tmp_path / "reply.json", _reply("imports"))
    published = lib.homes["owner"] / "published"
    before = len(list(published.glob("*.json")))
    modules = _imports("publish", str(path), home=lib.homes["owner"])
    assert {"alexandria.cli.publish", "alexandria.client", "httpx",
            "alexandria.core.schema"} <= modules
    assert not {m for m in modules if m.startswith("alexandria.api")}
    assert not {"alexandria.cli.operator", "alexandria.cli.log", "starlette"} & modules
    assert len(list(published.glob("*.json"))) == before + 1  # it did publish


def test_a_command_imports_only_its_own_module(lib: Library) -> None:
    modules = _imports("search", "x", "--library", lib.url)
    assert "alexandria.cli.reading" in modules
    assert not {"alexandria.cli.operator", "alexandria.cli.log", "alexandria.api.app",
                "jsonschema"} & modules


# --- exit statuses, did-you-mean -------------------------------------------------------------


def test_a_mistyped_command_or_option_suggests_the_right_one() -> None:
    r = cli("publsh", "x.json", expect=2)
    assert "did you mean: publish?" in r.stderr
    r = cli("authority", "aprove", "X", expect=2)
    assert "did you mean: approve?" in r.stderr
    r = cli("publish", "x.json", "--nmae", "q", expect=2)
    assert "did you mean: --name?" in r.stderr


def test_help_has_groups_examples_and_defaults() -> None:
    top = cli("--help").stdout
    assert "Run a library (operators):" in top and "Read (no key needed):" in top
    assert "exit statuses:" in top
    publish = cli("publish", "--help").stdout
    assert "examples:" in publish and "--jsonl" in publish
    assert "(default:" in cli("changes", "--help").stdout


# --- errors that say what to do ----------------------------------------------------------------


def test_a_conflict_shows_the_head_and_how_to_revise(lib: Library) -> None:
    home = lib.homes["owner"]
    first = cli_json("get", "space", home=home)
    change = {**SPACE, "title": "UX, revised", "previous": first["id"]}
    cli("publish", "-", home=home, stdin=json.dumps(change))
    head = cli_json("get", "space", "--head", home=home)["id"]
    stale = {**SPACE, "title": "UX, stale", "previous": first["id"]}
    r = cli("publish", "-", home=home, stdin=json.dumps(stale), expect=4)
    assert f"current head: {head}" in r.stderr
    assert "`alexandria revise space`" in r.stderr  # the name the user knows it by
    assert r.stderr.count("[HEAD_CONFLICT]") == 1


def test_a_second_vote_shows_the_first_and_how_to_change_it(lib: Library) -> None:
    home = lib.homes["owner"]
    vote = {"kind": "vote", "title": "Useful", "body": "1",
            "links": [{"relation": "votes_on", "target": "$space"}]}
    first = cli("publish", "-", home=home, stdin=json.dumps(vote)).stdout.strip()
    r = cli("publish", "-", home=home, stdin=json.dumps({**vote, "title": "Again"}), expect=4)
    assert "[DUPLICATE_VOTE]" in r.stderr and f"alexandria revise {first}" in r.stderr


def test_content_mistakes_are_caught_before_signing(lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    rejected = _files(home / "rejected")
    cases = [
        ({"kind": "Discussion", "title": "t", "body": {"text": "x"}}, "did you mean 'discussion'"),
        ({"kind": "reply", "title": "t", "body": {"text": "x"},
          "links": [{"relation": "replies_to", "target": "$thread"}]}, "body of a reply is a"),
        ({**_reply("long"), "body": "x" * 50_000}, "BODY_TOO_LONG"),
        ({"kind": "claim", "title": "t", "body": {"scope": "s"},
          "links": [{"relation": "contained_in", "target": "$space"}]}, "SCHEMA_VIOLATION"),
    ]
    for content, expected in cases:
        r = cli("publish", "-", home=home, stdin=json.dumps(content), expect=3)
        assert expected in r.stderr, r.stderr
    assert _files(home / "pending") == [] and _files(home / "rejected") == rejected


def test_credentials_in_a_url_are_never_echoed_sent_or_kept(lib: Library) -> None:
    home = lib.homes["owner"]
    evidence = {"kind": "evidence", "title": "Leaky",
                "body": {"method": "source", "content": "c", "sources": [
                    {"label": "paper", "url": "https://alice:s3cret@example.org/paper"}]},
                "links": [{"relation": "contained_in", "target": "$space"}]}
    r = cli("--json", "publish", "-", home=home, stdin=json.dumps(evidence), expect=3)
    assert "s3cret" not in r.stderr + r.stdout and "CREDENTIALS_IN_URL" in r.stderr
    assert "https://***@example.org" in r.stderr
    assert _files(home / "pending") == []
    assert not any("s3cret" in p.read_text() for p in _files(home / "rejected"))
    url = lib.url.replace("http://", "http://bob:hunter2@")
    r = cli("search", "x", "--library", url, expect=1)
    assert "hunter2" not in r.stderr and "CREDENTIALS_IN_URL" in r.stderr


def test_rejected_envelopes_can_be_cleared(lib: Library) -> None:
    home = lib.homes["owner"]
    r = cli("publish", "-", home=home, stdin=json.dumps(_reply("lost", "ab" * 32)), expect=3)
    assert "never resent" in r.stderr
    rejected = cli_json("pending", home=home)["rejected"]
    assert len(rejected) >= 1
    r = cli("pending", "--clear-rejected", home=home)
    assert f"deleted {len(rejected)} rejected envelope" in r.stderr
    assert _files(home / "rejected") == []
    assert cli_json("pending", home=home)["rejected"] == []


def test_not_set_up_and_kept_pending_exit_statuses(lib: Library, tmp_path: Path) -> None:
    r = cli("publish", "-", home=tmp_path / "fresh", stdin=json.dumps(SPACE), expect=7)
    assert "NO_WORKER_KEY" in r.stderr


# --- reading without a key, -v, broken pipes -------------------------------------------------


def test_reading_needs_no_key(lib: Library, tmp_path: Path) -> None:
    fresh = tmp_path / "reader"
    thread = cli_json("get", "thread", home=lib.homes["owner"])["id"]
    r = cli("search", "Thread", home=fresh, env={"ALEXANDRIA_LIBRARY": lib.url})
    assert thread in r.stdout
    r = cli("get", thread, "--library", lib.url, home=fresh)
    assert "verified" in r.stdout
    assert not fresh.exists()  # nothing written for a read


def test_publishing_to_an_unpinned_library_is_refused_before_signing(lib: Library) -> None:
    """``--library`` of another URL reads unpinned; a contribution is signed for one pinned
    library, so publishing there is a setup error (exit 7), never a record without genesis."""
    home = lib.homes["owner"]
    pending = sorted((home / "pending").glob("*.json"))
    other = lib.url.replace("127.0.0.1", "localhost")
    r = cli("publish", "-", "--library", other, home=home, stdin=json.dumps(_reply("unpinned")),
            expect=7)
    assert "NOT_PINNED" in r.stderr and other in r.stderr, r.stderr
    assert sorted((home / "pending").glob("*.json")) == pending


def test_verbose_shows_requests(lib: Library) -> None:
    r = cli("-v", "search", "Thread", "--library", lib.url)
    assert "debug:" in r.stderr and f"GET {lib.url}/api/catalogue" in r.stderr


def test_a_closed_pipe_is_quiet(lib: Library) -> None:
    home = lib.homes["owner"]
    lines = "".join(json.dumps(_reply(f"pipe {i}")) + "\n" for i in range(60))
    cli("publish", "--jsonl", "-", home=home, stdin=lines)
    thread = cli_json("get", "thread", home=home)["id"]
    shell = (f"{' '.join(CLI)} --json changes --root {thread} --reset | head -c 10;"
             " echo; echo status=${PIPESTATUS[0]}")
    r = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120,
                       env=cli_env(home), cwd=ROOT)
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    assert "status=0" in r.stdout


# --- publishing many, revise -----------------------------------------------------------------


def test_publish_many_files_and_jsonl_with_names(lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    a = write_content(tmp_path / "a.json", _reply("a"))
    b = write_content(tmp_path / "b.json", _reply("b"))
    ids = cli("publish", str(a), str(b), home=home).stdout.split()
    assert len(ids) == 2 and all(len(i) == 64 for i in ids)
    lines = [
        {**SPACE, "title": "Batch space", "name": "bspace"},
        {"kind": "discussion", "title": "Batch thread", "body": {"text": "t"},
         "links": [{"relation": "contained_in", "target": "$bspace"}], "name": "bthread"},
        _reply("batch 1", "$bthread"),
        _reply("batch 2", "$nobody"),
        _reply("batch 3", "$bthread"),
    ]
    jsonl = tmp_path / "batch.jsonl"
    text = [json.dumps(line) + "\n" for line in lines]
    text.insert(3, "{not json\n")  # an unreadable line is reported in its place
    jsonl.write_text("".join(text))
    r = cli("--json", "publish", "--jsonl", str(jsonl), home=home, expect=3)
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["status"] for x in results] == ["admitted", "admitted", "admitted", "refused",
                                              "refused", "admitted"]
    assert results[3]["source"].endswith(":4") and results[3]["error"]["code"] == "NOT_JSON"
    assert results[4]["error"]["code"] == "UNKNOWN_REFERENCE"
    names = dict(line.split() for line in (home / "names").read_text().splitlines())
    assert names["bspace"] == results[0]["id"] and names["bthread"] == results[1]["id"]
    reply = cli_json("get", results[5]["id"], home=home)
    assert reply["record"]["links"][0]["target"] == results[1]["id"]
    assert _files(home / "pending") == []


def _batch_requests(url: str) -> float:
    """``POST /api/entries/batch`` requests the server has timed (its ``/metrics``)."""
    text = httpx.get(f"{url}/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("alexandria_request_duration_seconds_count")
               and 'route="/api/entries/batch"' in line)


def test_publish_jsonl_sends_batches_of_at_most_1000(lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    thread = cli_json("get", "thread", home=home)["id"]
    lines = [_reply(f"bulk {i}", thread) for i in range(1200)]
    missing = "0" * 64
    lines[700] = _reply("to nothing", missing)  # the library refuses this one alone
    jsonl = tmp_path / "bulk.jsonl"
    jsonl.write_text("".join(json.dumps(line) + "\n" for line in lines))
    before = _batch_requests(lib.url)
    r = cli("--json", "publish", "--jsonl", str(jsonl), home=home, expect=3)
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["status"] for x in results] == ["admitted"] * 700 + ["rejected"] + ["admitted"] * 499
    assert results[700]["error"]["code"] == "LINK_TARGET_MISSING"
    sizes = _chunks_of(1200)
    assert max(sizes) <= CHUNK == 1000 and sizes[0] < sizes[1]  # small first, then larger
    assert _batch_requests(lib.url) - before == len(sizes)
    assert _files(home / "pending") == []
    rejected = results[700]["id"]
    assert (home / "rejected" / f"{rejected}.json").exists()
    # what published/ holds is the library's signed record, byte for byte
    some = results[1000]["id"]
    served = httpx.get(f"{lib.url}/api/entries/{some}").content
    assert (home / "published" / f"{some}.json").read_bytes() == served
    # publishing the same lines again: each one published already is refused as a duplicate
    # before it is signed (never a silent second copy)...
    again = cli("publish", "--jsonl", str(jsonl), home=home, expect=None)
    assert again.returncode != 0 and again.stdout.split() == []
    assert "1199 refused before signing" in again.stderr, again.stderr
    # ...unless asked for: new signatures, new revisions
    again = cli("publish", "--jsonl", str(jsonl), "--allow-duplicate", home=home, expect=3)
    assert len(again.stdout.split()) == 1199


def _chunks_of(lines: int) -> list[int]:
    """The lines of each chunk ``publish --jsonl`` sends for ``lines`` lines."""
    sizes: list[int] = []
    for size in chunk_sizes():
        if lines <= 0:
            return sizes
        sizes.append(min(size, lines))
        lines -= size
    raise AssertionError("unreachable")


def test_batch_keeps_what_it_signed_when_the_library_is_down(lib: Library,
                                                            tmp_path: Path) -> None:
    home = lib.homes["owner"]
    thread = cli_json("get", "thread", home=home)["id"]
    jsonl = tmp_path / "down.jsonl"
    jsonl.write_text("".join(json.dumps(_reply(f"down {i}", thread)) + "\n" for i in range(3)))
    lib.stop()
    try:
        r = cli("publish", "--jsonl", str(jsonl), home=home, expect=5)
        assert "kept pending" in r.stderr
        assert len(_files(home / "pending")) == 3
    finally:
        lib.start()
    r = cli("retry", home=home)
    assert r.stdout.count("admitted") == 3
    assert "retry [" not in r.stderr  # no progress lines when stderr is not a terminal


def test_a_batch_refused_for_this_clients_share_is_sent_again(lib: Library,
                                                             tmp_path: Path) -> None:
    """While another batch from this address announces 8 MiB (one client's share of the batch
    budget), the library answers this client's batches 429 CLIENT_BUSY: the CLI waits and
    sends the same bytes again, and everything is admitted once the other batch is gone."""
    home = lib.homes["owner"]
    thread = cli_json("get", "thread", home=home)["id"]
    jsonl = tmp_path / "busy.jsonl"
    jsonl.write_text("".join(json.dumps(_reply(f"busy {i}", thread)) + "\n" for i in range(3)))
    hog = socket.create_connection(("127.0.0.1", lib.port), timeout=10)
    hog.sendall(b"POST /api/entries/batch HTTP/1.1\r\nHost: x\r\nContent-Type:"
                b" application/x-ndjson\r\nContent-Length: 8388608\r\n\r\n{}")
    try:
        time.sleep(0.3)
        refused = httpx.post(f"{lib.url}/api/entries/batch", content=b"{}",
                             headers={"content-type": "application/x-ndjson"})
        assert refused.status_code == 429, refused.text
        threading.Timer(1.5, hog.close).start()
        r = cli("--json", "publish", "--jsonl", str(jsonl), home=home)
    finally:
        hog.close()
    assert [json.loads(line)["status"] for line in r.stdout.splitlines()] == ["admitted"] * 3
    assert _files(home / "pending") == []


def test_a_batch_killed_midway_is_finished_by_retry_without_a_second_copy(
    lib: Library, tmp_path: Path
) -> None:
    """``kill -9`` of ``publish --jsonl`` while chunks are in flight (one made durable in a
    chunk file of pending/, one sent, one being recorded): ``retry`` sends what was left
    pending, each admitted once, and nothing of the chunk files stays behind."""
    home = lib.homes["owner"]
    thread = cli_json("get", "thread", home=home)["id"]
    jsonl = tmp_path / "killed.jsonl"
    jsonl.write_text("".join(json.dumps(_reply(f"killed {i}", thread)) + "\n"
                             for i in range(3000)))
    published, entries = set(_files(home / "published")), log_size(lib.url)
    proc = subprocess.Popen([*CLI, "publish", "--jsonl", str(jsonl)], env=cli_env(home),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline
            if len(set(_files(home / "published")) - published) >= 100:
                # frozen, pending/ stays as it is: killed only with a chunk in it (between
                # one chunk's answer and the next chunk's file there is none)
                proc.send_signal(signal.SIGSTOP)
                if any(n.startswith("chunk-") for n in os.listdir(home / "pending")):
                    break
                proc.send_signal(signal.SIGCONT)
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()
    r = cli("--json", "retry", home=home)
    assert {x["status"] for x in json.loads(r.stdout)["results"]} <= {"admitted"}
    # (a file being written when the kill came stays, never read, until it is a day old)
    assert [n for n in os.listdir(home / "pending") if not n.endswith(".tmp")] == []
    new = set(_files(home / "published")) - published
    titles = [json.loads(p.read_bytes())["record"]["title"] for p in new]
    assert len(titles) == len(set(titles)) >= 100
    assert log_size(lib.url) == entries + len(new)  # each admitted once


_FAIL_SECOND_WRITE = """
import errno, sys
from alexandria.cli import main
from alexandria.cli.pending import Outbox
real, calls = Outbox.write_many, []
def write_many(self, items):
    calls.append(len(items))
    if len(calls) == 2:
        raise OSError(errno.ENOSPC, "No space left on device")
    return real(self, items)
Outbox.write_many = write_many
try:
    code = main(sys.argv[1:])
finally:
    print("pending writes", calls, file=sys.stderr)
sys.exit(code)
"""


def test_batch_stops_at_a_chunk_it_cannot_make_durable(lib: Library, tmp_path: Path) -> None:
    """Chunks are made durable in pending/ on a thread of their own while the one before is
    in flight: when one cannot be written (the disk is full), it is not sent, no later chunk
    is written or sent, and what was admitted before it is published."""
    home = lib.homes["owner"]
    thread = cli_json("get", "thread", home=home)["id"]
    jsonl = tmp_path / "full.jsonl"
    first, second, third = _chunks_of(10**6)[:3]
    jsonl.write_text("".join(json.dumps(_reply(f"full {i}", thread)) + "\n"
                             for i in range(first + second + third + 10)))
    published, entries = len(_files(home / "published")), log_size(lib.url)
    r = subprocess.run([sys.executable, "-c", _FAIL_SECOND_WRITE, "--json", "publish",
                        "--jsonl", str(jsonl)], capture_output=True, text=True,
                       env=cli_env(home), cwd=ROOT, timeout=120)
    assert r.returncode != 0, r.stderr
    assert f"pending writes [{first}, {second}]" in r.stderr  # the third: never written
    assert "No space left on device" in r.stderr
    admitted = [json.loads(line)["id"] for line in r.stdout.splitlines()]
    assert len(admitted) == first
    assert len(_files(home / "published")) == published + first
    assert _files(home / "pending") == []
    assert log_size(lib.url) == entries + first  # nothing after the first chunk was sent


def test_revise_edits_the_current_head(lib: Library, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    head = cli_json("get", "thread", "--head", home=home)["id"]
    printed = json.loads(cli("revise", "thread", "--print", home=home).stdout)
    assert printed["previous"] == head and printed["body"] == {"text": "replies go here"}
    editor = tmp_path / "editor.py"
    editor.write_text("import json, sys\np = sys.argv[1]\nc = json.load(open(p))\n"
                      "c['title'] = 'Thread, edited'\njson.dump(c, open(p, 'w'))\n")
    r = cli("revise", "thread", home=home, env={"EDITOR": f"{sys.executable} {editor}"})
    new = r.stdout.strip()
    record = cli_json("get", new, home=home)["record"]
    assert record["previous"] == head and record["title"] == "Thread, edited"
    r = cli("revise", "thread", home=home, env={"EDITOR": "true"})
    assert "nothing changed" in r.stderr


def test_completion_scripts(tmp_path: Path) -> None:
    script = cli("completion", "bash").stdout
    assert "complete -o bashdefault -F _shtab_alexandria alexandria" in script
    path = tmp_path / "alexandria.bash"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)
    words = subprocess.run(
        ["bash", "-c", f"source {path}; COMP_WORDS=(alexandria authority ap); COMP_CWORD=2;"
         " _shtab_alexandria; echo ${COMPREPLY[@]}; COMP_WORDS=(alexandria pub); COMP_CWORD=1;"
         " _shtab_alexandria; echo ${COMPREPLY[@]}"],
        capture_output=True, text=True, check=True)
    assert words.stdout.splitlines() == ["approve", "publish"]
    assert "complete -c alexandria" in cli("completion", "fish").stdout
    assert cli("completion", "zsh").stdout.startswith("#compdef alexandria")


# --- serve, export ---------------------------------------------------------------------------


def test_serve_checks_its_port_first_writes_the_pin_and_logs(lib: Library,
                                                             tmp_path: Path) -> None:
    op = tmp_path / "op"
    op.mkdir()
    genesis = op / "genesis.json"
    genesis.write_bytes((lib.operator / "genesis.json").read_bytes())
    (op / "root-1.key").write_bytes((lib.operator / "root-1.key").read_bytes())
    db = tmp_path / "second.db"
    r = cli("serve", "--genesis", str(genesis), "--db", str(db), "--port", str(lib.port),
            expect=1)
    assert "PORT_IN_USE" in r.stderr and "serving" not in r.stdout and not db.exists()
    port = free_port()
    server = subprocess.Popen(
        [*CLI, "serve", "--genesis", str(genesis), "--db", str(db), "--port", str(port),
         "--access-log"], env=cli_env(None), cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        for line in server.stdout:
            if line.startswith("serving"):
                break
        assert (op / "genesis.pin").read_text().strip() == lib.pin
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/genesis").status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        out, err = stop_group(server)
    assert f"next: participants run `alexandria login http://127.0.0.1:{port}" in err
    assert "root key" in err and "keep it offline" in err
    assert "GET /api/genesis" in out  # requests are logged after start-up


def test_export_progress_only_when_asked_or_on_a_terminal(lib: Library, tmp_path: Path) -> None:
    out = tmp_path / "log.jsonl"
    r = cli("export", "--db", str(lib.db), "--output", str(out))
    assert "exporting" not in r.stderr and out.exists()  # a short job: no plain line
    r = cli("export", "--db", str(lib.db), "--output", str(out), "--progress")
    assert "exporting: 100%" in r.stderr and " entries/s]" in r.stderr


def test_publish_jsonl_on_a_terminal_shows_a_bar_with_rate_and_time_left(
        lib: Library, tmp_path: Path) -> None:
    """stderr a terminal (a pty), stdout a pipe: the ids on stdout, the bar on stderr."""
    jsonl = tmp_path / "many.jsonl"
    jsonl.write_text("".join(json.dumps(_reply(f"pty {i}")) + "\n" for i in range(30)))
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    try:
        r = subprocess.run([*CLI, "publish", "--jsonl", str(jsonl)], stdout=subprocess.PIPE,
                           stderr=follower, env=cli_env(lib.homes["owner"]), cwd=ROOT,
                           timeout=120, check=False)
        os.close(follower)
        follower = -1
        err = b""
        with contextlib.suppress(OSError):  # EIO once the pty's other side is closed
            while chunk := os.read(leader, 65536):
                err += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert r.returncode == 0, err
    assert len(r.stdout.split()) == 30
    text = err.decode()
    assert "publishing: 100%" in text and "30/30" in text
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d, [\d.]+ contributions/s\]", text), text


class _TamperingProxy:
    """Forwards GETs to the library, changing the title of every record it passes on."""

    def __init__(self, upstream: str) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                r = httpx.get(upstream + self.path)
                body = r.content.replace(b'"title":"Thread"', b'"title":"Thread!"')
                self.send_response(r.status_code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_record_that_does_not_verify_exits_6(lib: Library) -> None:
    thread = cli_json("get", "thread", home=lib.homes["owner"])["id"]
    proxy = _TamperingProxy(lib.url)
    try:
        r = cli("get", thread, "--library", proxy.url, expect=6)
        assert "does not verify" in r.stderr
    finally:
        proxy.close()
