"""A toy C2SP log for the witness tests: leaves in memory, checkpoints signed as notes, proofs
from ``core/merkle.py``; and a witness process on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alexandria.core import merkle, note
from alexandria.core.checkpoint import Checkpoint, sign_checkpoint
from alexandria.core.keys import SigningKey
from alexandria.core.tlog_witness import format_add_checkpoint
from tests.support.liveserver import Server, free_port


class ToyLog:
    def __init__(self, origin: str = "example.org/toy", seed: int = 1) -> None:
        self.origin = origin
        self.key = SigningKey(bytes([seed]) * 32)
        self.verifier = note.Verifier(origin, note.ED25519, self.key.public_bytes)
        self.nodes: dict[tuple[int, int], bytes] = {}
        self.size = 0

    def get(self, level: int, index: int) -> bytes:
        return self.nodes[(level, index)]

    def append(self, *data: bytes) -> ToyLog:
        for level, index, h in merkle.append_leaves(
            self.size, [merkle.leaf_hash(d) for d in data], self.get
        ):
            self.nodes[(level, index)] = h
        self.size += len(data)
        return self

    def root(self, size: int | None = None) -> bytes:
        return merkle.root_hash(self.size if size is None else size, self.get)

    def checkpoint(self, size: int | None = None) -> str:
        size = self.size if size is None else size
        return sign_checkpoint(Checkpoint(self.origin, size, self.root(size)), self.key)

    def proof(self, old: int, new: int | None = None) -> list[bytes]:
        new = self.size if new is None else new
        if old == 0 or old == new:
            return []
        return merkle.consistency_proof(old, new, self.get)

    def request(self, old: int, size: int | None = None) -> bytes:
        size = self.size if size is None else size
        return format_add_checkpoint(old, self.proof(old, size), self.checkpoint(size))


class WitnessProcess(Server):
    """``alexandria witness serve`` as a subprocess (its own session: SIGKILL hits it alone)."""

    def __init__(self, directory: Path, logs: list[str], port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "alexandria.cli", "witness", "serve", "--dir",
               str(directory), "--port", str(self.port)]
        for log in logs:
            cmd += ["--log", log]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self.wait_ready()
