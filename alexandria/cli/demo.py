"""``alexandria demo``: a fresh library seeded with the contract's worked example, then served.

Everything goes through the command line itself, as an operator and two participants would use
it, so the demo doubles as a check that the documented flow works end to end:

1. ``genesis init`` in DIR/operator; the server (``alexandria serve --genesis --db --log-key``)
   starts as a child process;
2. ``authority issue`` for the native application and for the log;
3. for ``owner`` and ``peer``, each with their own config home beside DIR (DIR-homes/owner,
   DIR-homes/peer, kept when the next demo replaces DIR):
   ``worker init``, ``authority enroll``, ``authority approve``, ``worker import``;
4. the twelve steps of the contract's ``object_examples``, each written to DIR/examples/ with its
   ``$name`` references and published by its actor with ``publish FILE --name NAME``;
5. the library's URL is written to DIR/library.url (a second shell reads it from there), and
   the server keeps running until interrupted.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import orjson

from alexandria.cli import main
from alexandria.cli.terminal import Progress, note, say
from alexandria.core.contract import contract_bytes
from alexandria.core.keys import SigningKey
from alexandria.errors import Failed, Malformed
from alexandria.files import atomic_write, private_dir, write_json
from alexandria.store.db_lock import lock_path

MARKER = ".alexandria-demo"
DATABASE = "library.db"
#: the database, its write-ahead log and shared memory, and its lock file
DATABASE_FILES = (DATABASE, f"{DATABASE}-wal", f"{DATABASE}-shm", lock_path(DATABASE).name)
PARTICIPANTS = ("owner", "peer")
URL_FILE = "library.url"  # the URL served, for a second shell: $(cat alexandria-demo/library.url)
START_TIMEOUT_S = 60.0


class DemoFailed(Failed):
    default_code = "DEMO_FAILED"


def homes_dir(directory: Path) -> Path:
    """The participants' config homes live beside the demo directory, not in it: the next demo
    replaces DIR, and a key someone kept using must not go with it.  A home found there is
    reused: same key, the new library's pin and a new certificate."""
    return directory.parent / f"{directory.name}-homes"


def worked_example() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = orjson.loads(contract_bytes())["object_examples"]["steps"]
    return steps


def cli(argv: list[str], home: Path | None = None) -> Any:
    """Run one ``alexandria --json …`` command in this process; its JSON output, parsed."""
    saved = os.environ.get("ALEXANDRIA_HOME")
    out, err = io.StringIO(), io.StringIO()
    try:
        if home is not None:
            os.environ["ALEXANDRIA_HOME"] = str(home)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["--json", *argv])
    finally:
        if saved is None:
            os.environ.pop("ALEXANDRIA_HOME", None)
        else:
            os.environ["ALEXANDRIA_HOME"] = saved
    if status != 0:
        sys.stderr.write(err.getvalue())
        raise DemoFailed(f"`alexandria {' '.join(argv)}` failed (exit {status})", argv=argv)
    text = out.getvalue().strip()
    return orjson.loads(text) if text else None


MARKER_TEXT = "made by `alexandria demo`; replaced by the next one\n"


def _made_by_demo(directory: Path) -> bool:
    """Whether ``directory`` holds what a demo makes and nothing else: a marker file with the
    demo's text, and only the entries ``run_demo`` creates (a marker copied or planted into
    somebody's directory does not make it the demo's to delete)."""
    marker = directory / MARKER
    if directory.is_symlink() or marker.is_symlink() or not marker.is_file():
        return False
    if marker.read_text(errors="replace") != MARKER_TEXT:
        return False
    made = {MARKER, "operator", "names", "examples", URL_FILE, *DATABASE_FILES, *PARTICIPANTS}
    return all(entry.name in made and not entry.is_symlink() for entry in directory.iterdir())


def fresh_directory(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()):
        if not _made_by_demo(directory):
            raise Malformed(
                f"{directory}/ exists and holds files the demo did not make: pass --dir",
                "DIR_NOT_EMPTY", dir=str(directory),
            )
        shutil.rmtree(directory)
    private_dir(directory)
    atomic_write(directory / MARKER, MARKER_TEXT.encode())


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise Malformed(f"cannot listen on {host}:{port} ({exc.strerror}): pass --port",
                            "PORT_IN_USE", host=host, port=port) from exc


@contextlib.contextmanager
def server(argv: list[str], url: str) -> Iterator[subprocess.Popen[bytes]]:
    """``alexandria serve …`` as a child process, ready when it answers ``/api/genesis``."""
    child = subprocess.Popen([sys.executable, "-m", "alexandria.cli", *argv])
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if child.poll() is not None:
                raise DemoFailed(f"the server exited with status {child.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/api/genesis", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise DemoFailed(f"the server did not answer on {url} in {START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)
        yield child
    finally:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def seed(directory: Path, url: str, pin: str, progress: Progress) -> dict[str, str]:
    """Steps 2–4 of the module docstring; the names published, by name."""
    op = str(directory / "operator")
    cli(["authority", "issue", "--dir", op, "--library", url])
    progress.step("native-application authority")
    cli(["authority", "issue", "--dir", op, "--library", url, "--roles", "log"])
    progress.step("log authority")
    for name in PARTICIPANTS:
        home = homes_dir(directory) / name
        worker = cli(["worker", "init", "--library", url, "--genesis", pin], home)["worker"]
        cli(["authority", "enroll", name, "--dir", op])
        cert = home / "approved-certificate.json"
        cli(["authority", "approve", "--dir", op, "--actor", name, "--worker", worker,
             "--scopes", "all", "--days", "365", "--out", str(cert)])
        cli(["worker", "import", str(cert)], home)
        progress.step(f"participant {name}")
    names_file = directory / "names"
    examples = directory / "examples"
    for i, step in enumerate(worked_example(), 1):
        path = examples / f"{i:02d}-{step['name']}.json"
        write_json(path, step["content"])
        cli(["publish", str(path), "--name", step["name"], "--names", str(names_file)],
            homes_dir(directory) / step["actor"])
        progress.step(f"{step['actor']} published ${step['name']}")
    for name in PARTICIPANTS:
        shutil.copyfile(names_file, homes_dir(directory) / name / "names")
    return dict(line.split() for line in names_file.read_text().splitlines())


def _raise_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_demo(directory: Path, host: str, port: int) -> int:
    check_port_free(host, port)
    fresh_directory(directory)
    directory = directory.resolve()
    op = directory / "operator"
    url = f"http://{host}:{port}"
    pin = cli(["genesis", "init", "--dir", str(op), "--library", "alexandria-demo",
               "--origin", f"{host}:{port}/alexandria-demo/log"])["pin"]
    SigningKey.generate().save(op / "log.key")  # certified by `authority issue --roles log`
    serve = ["serve", "--genesis", str(op / "genesis.json"), "--db", str(directory / DATABASE),
             "--log-key", str(op / "log.key"), "--host", host, "--port", str(port)]
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with server(serve, url) as child:
            progress = Progress(4 + len(worked_example()), "seeding")
            names = seed(directory, url, pin, progress)
            atomic_write(directory / URL_FILE, f"{url}\n".encode())
            _summary(directory, url, pin, names)
            child.wait()
            return 0 if child.returncode == 0 else 1
    except KeyboardInterrupt:
        note("demo stopped")
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _summary(directory: Path, url: str, pin: str, names: dict[str, str]) -> None:
    here = Path.cwd()
    rel = directory.relative_to(here) if directory.is_relative_to(here) else directory
    say("")
    say(f"Alexandria demo library: {url}")
    say(f"genesis pin: {pin}   (also in {rel}/operator/genesis.pin; the URL in {rel}/{URL_FILE})")
    say(f"the worked example: {len(names)} contributions by owner and peer ({rel}/examples/;"
        f" their config homes: {homes_dir(Path(rel))}/)")
    say("")
    say("Try, in another terminal (the README's tour goes further):")
    say(f"  export ALEXANDRIA_LIBRARY={url} PATH=$PWD/.venv/bin:$PATH")
    say("  alexandria search arithmetic               # reading needs no key")
    say(f"  alexandria get claim --head --names {rel}/names")
    say(f"  alexandria login --name alice --genesis {pin}")
    say(f"  alexandria authority approve CODE --dir {rel}/operator   # the operator's side")
    say(f"  curl -s {url}/api/entries/{names.get('merge', '')}")
    say("")
    say(f"Restart later without reseeding: alexandria serve --genesis {rel}/operator/genesis.json"
        f" --db {rel}/{DATABASE} --log-key {rel}/operator/log.key")
    say("Ctrl-C stops the server.")
