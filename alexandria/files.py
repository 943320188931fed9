"""Small files written by the CLI, the operator commands and the server: replaced atomically, so
a crash never leaves half a file, and read back with a typed error when they are not JSON.

Everything here is private and never follows a symbolic link at the name it writes: files are
created 0600 and directories 0700 (the library's database holds every actor's private lists
and the cursor secret; an operator directory holds keys), a replacement is a fresh temporary
file renamed over the name (a symlink planted there is replaced, its target never written), and
an append opens with ``O_NOFOLLOW``.  ``PRIVATE_UMASK`` is what the CLI runs under, so that what
other code creates (SQLite's ``-wal`` and ``-shm`` files) is private too.

A ground-floor module beside ``errors.py``: every layer that keeps a file (the participant's
configuration, the operator's key directory, the embedded library's data folder) uses it.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from alexandria.errors import Malformed

#: a participant, key or revision name: what ``publish --name`` and the operator's directory use
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


PRIVATE_UMASK = 0o077
FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """``path`` as a directory, created (with its missing parents) 0700 when absent; an
    existing directory keeps the mode its owner gave it."""
    path = Path(path)
    if not path.is_dir():
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    return path


def temporary_beside(path: Path, mode: int = FILE_MODE) -> tuple[int, str]:
    """A new file (its descriptor and name) in ``path``'s directory, to be renamed over
    ``path``: created exclusively, never through a symbolic link, with exactly ``mode``.  What
    ``tempfile.mkstemp`` does, without importing ``tempfile`` (and ``shutil``, ``random``)
    into every short CLI command."""
    return temporary_at(str(path), mode)


#: the name ``temporary_at`` gives a file until it is renamed: ``.NAME.RANDOM.tmp``
TEMPORARY = re.compile(r"\..+\.[0-9a-f]{12}\.tmp\Z", re.DOTALL)


def temporary_at(name: str, mode: int = FILE_MODE, dir_fd: int | None = None) -> tuple[int, str]:
    """``temporary_beside`` for a name relative to the directory ``dir_fd`` when given."""
    folder, base = os.path.split(name)
    for _attempt in range(100):
        tmp = os.path.join(folder, f".{base}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode,
                         dir_fd=dir_fd)
        except FileExistsError:
            continue
        try:
            os.fchmod(fd, mode)  # exactly ``mode``, whatever the umask
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=dir_fd)
            raise
        return fd, tmp
    raise FileExistsError(f"no free temporary name beside {name}")  # pragma: no cover


def remove_abandoned(folder: Path, names: Iterable[str], older_than: float) -> list[str]:
    """Remove each of ``names`` (entries of ``folder``) that is a temporary file of
    ``temporary_at`` last written more than ``older_than`` seconds ago: one a process killed
    while writing left behind (a live writer renames its file within moments).  The names
    removed."""
    removed: list[str] = []
    limit = time.time() - older_than
    for name in names:
        if not TEMPORARY.match(name):
            continue
        with contextlib.suppress(FileNotFoundError):  # renamed or removed meanwhile
            if os.lstat(folder / name).st_mtime < limit:
                os.unlink(folder / name)
                removed.append(name)
    return removed


@contextlib.contextmanager
def atomic_stream(path: Path, mode: int = FILE_MODE) -> Iterator[IO[bytes]]:
    """A file to write that replaces ``path`` once the block ends without error (flushed and
    synced): a reader, or a crash, sees the old file or the new one, never half."""
    path = Path(path)
    private_dir(path.parent)
    fd, tmp = temporary_beside(path, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Replace ``path`` with ``data`` (``atomic_stream``)."""
    with atomic_stream(path, mode) as fh:
        fh.write(data)


def append_line(path: Path, line: str) -> None:
    """Append ``line`` with one ``write`` (concurrent appends never interleave), creating the
    file 0600; a symbolic link at ``path`` is refused, not followed."""
    path = Path(path)
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, FILE_MODE)
    except OSError as exc:
        raise Malformed(f"cannot append to {path}: {exc.strerror}", "UNSAFE_FILE",
                        path=str(path)) from exc
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def create_private(path: Path) -> None:
    """Create ``path`` empty and 0600 unless it exists (a database, before SQLite opens it)."""
    path = Path(path)
    private_dir(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE))


def write_json(path: Path, value: Any, mode: int = FILE_MODE) -> None:
    atomic_write(path, orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n", mode)


def read_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise Malformed(f"{path} is not valid JSON: {exc}", "BAD_CONFIG_FILE",
                        path=str(path)) from exc


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise Malformed(
            f"{name!r} is not a name: letters, digits, _ . - (at most 64)", "BAD_NAME", name=name
        )
    return name
