"""Files the library, the operator and the participant keep are theirs alone, and the CLI never
writes through a symbolic link planted at a name it writes.  SQLite only: the files
checked are the embedded library's database and its ``-wal``/``-shm`` files (a PostgreSQL
database's files belong to its server, which sets their modes)."""

from __future__ import annotations

import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import Library, cli, write_content
from tests.support.liveserver import free_port, stop_group


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    library = Library.create(tmp_path_factory.mktemp("private") / "site")
    library.participant("ann")
    yield library
    library.stop()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _claim(title: str) -> dict[str, object]:
    return {"kind": "claim", "title": title, "links": [], "previous": "",
            "body": {"statement": title, "scope": "Tests", "assumptions": []}}


def test_everything_created_is_private(lib: Library) -> None:
    home = lib.homes["ann"]
    cli("publish", str(write_content(lib.base / "c.json", _claim("Mine"))), "--name", "mine",
        home=home)
    # several files go through the batch route, whose pending/ and published/ files are
    # written a chunk at a time
    cli("publish", *(str(write_content(lib.base / f"c{i}.json", _claim(f"Mine {i}")))
                     for i in range(3)), home=home)
    # the database, its -wal and -shm files (open while the server runs), the operator's
    # directory (keys, genesis.pin, actors.json), the participant's home (key, names)
    files = [lib.db, Path(f"{lib.db}-wal"), Path(f"{lib.db}-shm")]
    assert all(f.exists() for f in files)
    files += [p for p in lib.operator.rglob("*") if p.is_file()]
    files += [p for p in home.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"actors.json", "genesis.pin", "genesis.json", "authority.key", "names"} <= names
    assert {p: oct(_mode(p)) for p in files if _mode(p) != 0o600} == {}
    dirs = [lib.operator, home] + [p for p in [*lib.operator.rglob("*"), *home.rglob("*")]
                                   if p.is_dir()]
    assert {p: oct(_mode(p)) for p in dirs if _mode(p) != 0o700} == {}


def test_the_embedded_default_library_is_private(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "alexandria.cli", "serve", "--port", str(port)], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        data = tmp_path / "alexandria-data"
        deadline = time.monotonic() + 60
        while not Path(f"{data}/library.db-wal").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _mode(data) == 0o700
        assert {p.name: oct(_mode(p)) for p in data.iterdir() if _mode(p) != 0o600} == {}
    finally:
        stop_group(proc)


def test_no_write_follows_a_planted_link(lib: Library, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("")  # reads through the link are harmless: an empty names file
    home = lib.homes["ann"]
    # the names file: an append that would follow the link is refused
    names = tmp_path / "names"
    names.symlink_to(victim)
    r = cli("publish", str(write_content(tmp_path / "c.json", _claim("Linked"))), "--name",
            "linked", "--names", str(names), home=home, expect=None)
    assert "UNSAFE_FILE" in r.stderr
    # export: the output is a fresh file renamed over the name, whatever lay there
    out = tmp_path / "log.jsonl"
    (tmp_path / "log.jsonl.part").symlink_to(victim)
    out.symlink_to(victim)
    cli("export", "--db", str(lib.db), "--output", str(out))
    assert not out.is_symlink() and out.read_bytes().startswith(b"{")
    # genesis init: genesis.pin likewise
    op = tmp_path / "op"
    op.mkdir()
    (op / "genesis.pin").symlink_to(victim)
    cli("genesis", "init", "--dir", str(op), "--library", "other", "--origin",
        "127.0.0.1/other/log")
    assert not (op / "genesis.pin").is_symlink()
    assert victim.read_text() == ""
