"""Small files written by the CLI, the operator commands and the server: replaced atomically, so
a crash never leaves half a file, and read back with a typed error when they are not JSON.

A ground-floor module beside ``errors.py``: every layer that keeps a file (the participant's
configuration, the operator's key directory, the embedded library's data folder) uses it.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import orjson

from alexandria.errors import BadRequest

#: a participant, key or revision name: what ``publish --name`` and the operator's directory use
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``: a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, value: Any, mode: int = 0o644) -> None:
    atomic_write(path, orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n", mode)


def read_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"{path} is not valid JSON: {exc}", "BAD_CONFIG_FILE",
                         path=str(path)) from exc


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise BadRequest(
            f"{name!r} is not a name: letters, digits, _ . - (at most 64)", "BAD_NAME", name=name
        )
    return name
