"""The participant's per-user configuration directory.

Where: ``$ALEXANDRIA_HOME`` when set, else ``$XDG_CONFIG_HOME/alexandria``, else
``~/.config/alexandria``.  One directory is one participant of one library (two participants on
one machine use two directories)::

    worker.key          Ed25519 seed, hex and a newline, mode 0600 (PROTOCOL §1)
    certificate.json    the worker certificate the operator issued for that key
    library.json        {"url": LIBRARY URL, "genesis": PIN} — the pin is given out of band
    genesis.json        the genesis document, once fetched and checked against the pin
    names               "NAME REVISION" lines that ``publish --name`` appends; later lines win
    pending/            signed envelopes written before sending (see ``pending.py``)
    published/          the signed records the library returned for them
    rejected/           envelopes the library refused, each with its typed error beside it
    cursors/            ``changes`` cursors, one file per root
    content-index       "KEY REVISION" lines: the content of each envelope written, so that a
                        duplicate is found without reading every file (``duplicates.py``)

Every file is replaced atomically (write, fsync, rename), so a crash never leaves half a file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alexandria.core.keys import HEX64, SigningKey
from alexandria.errors import Malformed, Refused
from alexandria.files import NAME, append_line, read_json, write_json

DEFAULT_LIBRARY = "http://127.0.0.1:8080"


class SetupRequired(Refused):
    """The configuration lacks something a command needs (a key, a certificate, a library)."""

    default_code = "SETUP_REQUIRED"


def home_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("ALEXANDRIA_HOME"):
        return Path(env["ALEXANDRIA_HOME"])
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "alexandria"


@dataclass(frozen=True)
class LibraryConfig:
    url: str
    pin: str


def parse_names(text: str, source: str) -> dict[str, str]:
    names: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 2 or not NAME.match(fields[0]) or not HEX64.match(fields[1]):
            raise Malformed(f"{source}:{number}: expected NAME REVISION", "BAD_NAMES_FILE",
                            path=source, line=number)
        names[fields[0]] = fields[1]
    return names


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def locate(cls) -> Home:
        return cls(home_dir())

    # --- paths ---------------------------------------------------------------------------------

    @property
    def key_path(self) -> Path:
        return self.root / "worker.key"

    @property
    def certificate_path(self) -> Path:
        return self.root / "certificate.json"

    @property
    def library_path(self) -> Path:
        return self.root / "library.json"

    @property
    def genesis_path(self) -> Path:
        return self.root / "genesis.json"

    @property
    def names_path(self) -> Path:
        return self.root / "names"

    @property
    def pending_dir(self) -> Path:
        return self.root / "pending"

    @property
    def published_dir(self) -> Path:
        return self.root / "published"

    @property
    def rejected_dir(self) -> Path:
        return self.root / "rejected"

    @property
    def cursors_dir(self) -> Path:
        return self.root / "cursors"

    # --- worker key and certificate ------------------------------------------------------------

    def create_key(self) -> tuple[SigningKey, bool]:
        """The worker key, generated (mode 0600 from the first byte) when absent."""
        if self.key_path.exists():
            return self.worker_key(), False
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        key = SigningKey.generate()
        key.save(self.key_path)
        return key, True

    def worker_key(self) -> SigningKey:
        if not self.key_path.exists():
            raise SetupRequired(
                f"no worker key in {self.root}: run `alexandria login URL` (or, by hand,"
                " `alexandria worker init`)", "NO_WORKER_KEY",
                home=str(self.root),
            )
        mode = self.key_path.stat().st_mode & 0o777
        if mode & 0o077:
            raise SetupRequired(
                f"{self.key_path} is readable by others (mode {mode:o}): chmod 600 it",
                "KEY_FILE_MODE", path=str(self.key_path),
            )
        return SigningKey.load(self.key_path)

    def certificate(self) -> dict[str, Any]:
        if not self.certificate_path.exists():
            raise SetupRequired(
                "no worker certificate yet: run `alexandria login` and have the operator approve"
                " the code (or import one by hand: `alexandria worker import CERT`)",
                "NO_CERTIFICATE",
                home=str(self.root),
            )
        doc: dict[str, Any] = read_json(self.certificate_path)
        return doc

    def save_certificate(self, document: dict[str, Any]) -> None:
        write_json(self.certificate_path, document)

    # --- library -------------------------------------------------------------------------------

    def library(self) -> LibraryConfig:
        if not self.library_path.exists():
            raise SetupRequired(
                "no library configured: pass --library URL (or set ALEXANDRIA_LIBRARY) to read,"
                " or run `alexandria login URL` to publish", "NO_LIBRARY", home=str(self.root),
            )
        value = read_json(self.library_path)
        if not (isinstance(value, dict) and isinstance(value.get("url"), str)
                and isinstance(value.get("genesis"), str) and HEX64.match(value["genesis"])):
            raise Malformed(f'{self.library_path}: expected {{"url": URL, "genesis": PIN}}',
                            "BAD_CONFIG_FILE", path=str(self.library_path))
        return LibraryConfig(value["url"], value["genesis"])

    def library_or_none(self) -> LibraryConfig | None:
        return self.library() if self.library_path.exists() else None

    def save_library(self, config: LibraryConfig) -> None:
        write_json(self.library_path, {"url": config.url, "genesis": config.pin})

    def genesis_document(self) -> dict[str, Any] | None:
        if not self.genesis_path.exists():
            return None
        doc: dict[str, Any] = read_json(self.genesis_path)
        return doc

    def save_genesis(self, document: dict[str, Any]) -> None:
        write_json(self.genesis_path, document)

    # --- names ---------------------------------------------------------------------------------

    def names(self, path: Path | None = None) -> dict[str, str]:
        p = path or self.names_path
        return parse_names(p.read_text(), str(p)) if p.exists() else {}

    def append_name(self, name: str, rev: str, path: Path | None = None) -> None:
        """Append-only: one ``write`` of a whole line, so concurrent appends never interleave."""
        self.append_names([(name, rev)], path)

    def append_names(self, pairs: list[tuple[str, str]], path: Path | None = None) -> None:
        """Several lines in one ``write`` (whole lines, never interleaved) and one fsync; a
        symbolic link at the names file is refused, not followed (``files.append_line``)."""
        append_line(path or self.names_path, "".join(f"{name} {rev}\n" for name, rev in pairs))

    # --- changes cursors -----------------------------------------------------------------------

    def _cursor_path(self, root: str) -> Path:
        return self.cursors_dir / f"{root}.json"

    def cursor(self, root: str, pin: str) -> str | None:
        """The saved cursor of ``root`` for the library pinned as ``pin``."""
        p = self._cursor_path(root)
        if not p.exists():
            return None
        value = read_json(p)
        if not isinstance(value, dict) or value.get("genesis") != pin \
                or not isinstance(value.get("cursor"), str):
            return None
        cursor: str = value["cursor"]
        return cursor

    def save_cursor(self, root: str, pin: str, cursor: str, snapshot: int | None) -> None:
        write_json(self._cursor_path(root),
                   {"genesis": pin, "root": root, "cursor": cursor, "snapshot": snapshot})

    def drop_cursor(self, root: str) -> None:
        self._cursor_path(root).unlink(missing_ok=True)
