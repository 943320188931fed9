"""The largest checkpoint a library has published, kept outside the database it protects.

A database restored from an older backup has forgotten the entries admitted (and acknowledged)
after the backup, and the checkpoints signed over them.  If it signed a new checkpoint over a
different tail, the log would fork: two signed roots that no consistency proof can join.  So
the library keeps the largest checkpoint it has served in a small file beside its log key
(``LOG_KEY.published``; a restore copies the database, not this file), written atomically before
the checkpoint is served, and:

- raises the database's own record of it (``store/log_floor.py``) to it when it opens, so
  that every process of the server, and on PostgreSQL every node, knows it;
- signs nothing and admits nothing on a log that is not consistent with it: the tree must
  hold at least its leaves (else 503 ``CATCH_UP_REQUIRED``, saying how:
  ``alexandria restore --db FILE --catch-up URL|EXPORT`` replays the missing tail, verified,
  from a mirror or an export), and its first ``size`` leaves must have its root (else 503
  ``LOG_FORKED``).

Several server processes may sign; a lock file serialises the read-compare-replace, so the file
only ever grows.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alexandria.core.checkpoint import CheckpointError, parse_checkpoint
from alexandria.errors import DiskFull, Failed
from alexandria.files import atomic_write
from alexandria.store.log_floor import CatchUpRequired, LogForked, Published, behind_message
from alexandria.store.outage import outage_of

__all__ = ["CatchUpRequired", "LogForked", "Published", "PublishedCheckpoint", "behind_message",
           "path_for"]

SUFFIX = ".published"


def path_for(log_key: str | Path) -> Path:
    key = Path(log_key)
    return key.with_name(key.name + SUFFIX)


class PublishedCheckpoint:
    """The file ``path`` (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    def load(self) -> Published | None:
        try:
            note = self.path.read_text("utf-8")
        except FileNotFoundError:
            return None
        try:
            cp, _sigs = parse_checkpoint(note)
        except CheckpointError as exc:
            raise Failed(
                f"{self.path} does not hold a checkpoint note: {exc.message}; it records the"
                " largest checkpoint this library published, so it must not be edited",
                "PUBLISHED_CHECKPOINT_UNREADABLE", path=str(self.path),
            ) from exc
        return Published(cp.size, cp.root, note)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def record(self, size: int, note: str) -> None:
        """Remember ``note`` (of tree size ``size``) unless a larger one is remembered.  A file
        that cannot be written is a 503 (``DISK_FULL`` when its file system is full,
        ``PUBLISHED_CHECKPOINT_UNWRITABLE`` otherwise): the checkpoint is not served then."""
        try:
            with self._locked():
                current = self.load()
                if current is None or size > current.size:
                    atomic_write(self.path, note.encode("utf-8"), 0o600)
        except OSError as exc:
            outage = outage_of(exc)
            if isinstance(outage, DiskFull):
                raise DiskFull(
                    f"the disk holding {self.path} is full: the checkpoint of size {size} is"
                    " not served until it is recorded there; retry later (the operator must"
                    " free space)", path=str(self.path)) from exc
            raise Failed(
                f"cannot record the checkpoint of size {size} in {self.path}:"
                f" {exc.strerror or exc}; it is not served until it is recorded",
                "PUBLISHED_CHECKPOINT_UNWRITABLE", path=str(self.path)) from exc

