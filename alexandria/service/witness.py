"""A C2SP ``tlog-witness``: cosign a log's checkpoint only if it extends the last one cosigned.

``add-checkpoint`` checks, in the order the spec lists them, each with its status:

1. the body is ``old SIZE``, at most 63 proof hashes, a blank line, a checkpoint note (400;
   the HTTP layer already refused a body over ``MAX_BODY_BYTES`` with 413);
2. the checkpoint's origin is a log this witness follows (404);
3. at least one signature verifies against a key trusted for that origin; signatures of other
   keys are ignored, a trusted key's signature that does not verify is refused (403);
4. old size <= checkpoint size (400);
5. old size == the size of the latest checkpoint cosigned for the origin, 0 if none (409, body
   ``SIZE\\n``, ``text/x.tlog.size``);
6. the proof is an RFC 6962 consistency proof from the *stored* root at old size to the new
   root, empty when old size is 0 (422);
7. old size == new size: the roots are identical (409);
8. cosign (``cosignature/v1``, the current time in seconds), store the checkpoint as the
   latest, commit synced — 5 to 8 in one ``BEGIN IMMEDIATE`` transaction
   (``store/witness_state.py``) — then answer the cosignature line.

So two different checkpoints of the same size are never both cosigned: the second one meets a
stored record of that size and fails 7 (or 6 against a later one), also after a crash, since
nothing is answered before the record is durable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from alexandria.core import merkle, note
from alexandria.core.keys import SigningKey
from alexandria.core.tlog_witness import (
    WitnessRequestError,
    parse_add_checkpoint,
)
from alexandria.errors import Conflict, Failed, Invalid, NotFound, NotPermitted
from alexandria.files import write_json
from alexandria.store.witness_state import Witnessed, WitnessState

_log = logging.getLogger("alexandria.witness")

KEY_FILE = "witness.key"
CONFIG_FILE = "witness.json"
STATE_FILE = "witness.db"


class UnknownLog(NotFound):
    default_code = "WITNESS_UNKNOWN_LOG"


class NotSignedByLog(NotPermitted):
    default_code = "WITNESS_CHECKPOINT_NOT_SIGNED"


class SizeConflict(Conflict):
    """The request's old size is not the witness's latest cosigned size (or, at equal sizes,
    the roots differ); ``size`` is what the witness knows."""

    default_code = "WITNESS_SIZE_CONFLICT"

    def __init__(self, message: str, size: int, code: str | None = None) -> None:
        super().__init__(message, code, size=size)
        self.size = size


class BadProof(Invalid):
    default_code = "WITNESS_PROOF_INVALID"


@dataclass(frozen=True)
class ParsedCheckpoint:
    """Any C2SP checkpoint: origin, size, root (extension lines allowed, not interpreted)."""

    origin: str
    size: int
    root: bytes


def parse_checkpoint_text(text: bytes) -> ParsedCheckpoint:
    lines = text.decode("utf-8").split("\n")
    if len(lines) < 4:
        raise WitnessRequestError("the checkpoint has fewer than three lines")
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    if not origin:
        raise WitnessRequestError("the checkpoint's origin line is empty")
    if not size_text.isascii() or not size_text.isdigit() or (
        size_text != "0" and size_text.startswith("0")) or int(size_text) >= 1 << 64:
        raise WitnessRequestError("the checkpoint's size is not a canonical decimal uint64")
    root = note.b64decode_strict(root_text)
    if root is None or len(root) != 32:
        raise WitnessRequestError("the checkpoint's root is not base64 of 32 bytes")
    return ParsedCheckpoint(origin, int(size_text), root)


@dataclass(frozen=True)
class WitnessKey:
    """The witness's name and cosigning key."""

    name: str
    key: SigningKey

    @property
    def verifier(self) -> note.Verifier:
        return note.Verifier(self.name, note.COSIGNATURE_V1, self.key.public_bytes)


def init_witness_dir(directory: Path, name: str) -> WitnessKey:
    """Create a witness directory: the key (mode 0600) and ``witness.json`` (name, vkey)."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / KEY_FILE).exists() or (directory / CONFIG_FILE).exists():
        raise Conflict(f"{directory} already holds a witness", "WITNESS_EXISTS",
                       directory=str(directory))
    key = SigningKey.generate()
    identity = WitnessKey(name, key)
    vkey = identity.verifier.vkey  # checks the name first
    key.save(directory / KEY_FILE)
    write_json(directory / CONFIG_FILE, {"name": name, "vkey": vkey})
    return identity


def load_witness_dir(directory: Path) -> WitnessKey:
    config_path = directory / CONFIG_FILE
    if not config_path.exists():
        raise NotFound(f"{directory} holds no witness: run alexandria witness init",
                       "WITNESS_NOT_INITIALISED", directory=str(directory))
    config = orjson.loads(config_path.read_bytes())
    identity = WitnessKey(str(config["name"]), SigningKey.load(directory / KEY_FILE))
    if identity.verifier.vkey != config.get("vkey"):
        raise Failed(f"{config_path}: the vkey is not the key file's", "WITNESS_KEY_MISMATCH")
    return identity


class Witness:
    """One witness: its key, the logs it follows (origin -> trusted log verifiers), its state."""

    def __init__(
        self, identity: WitnessKey, logs: Mapping[str, Sequence[note.Verifier]],
        state: WitnessState, clock: Callable[[], float] = time.time,
    ) -> None:
        self.identity = identity
        self.logs = {origin: tuple(vs) for origin, vs in logs.items()}
        self.state = state
        self.clock = clock

    def add_checkpoint(self, body: bytes) -> str:
        """Steps 1-8 of the module docstring; the response body (one cosignature line)."""
        # 1.
        request = parse_add_checkpoint(body)
        try:
            signed = note.parse_note(request.checkpoint)
        except note.NoteError as exc:
            raise WitnessRequestError(f"the checkpoint is not a signed note: {exc.reason}",
                                      "WITNESS_CHECKPOINT_MALFORMED") from None
        cp = parse_checkpoint_text(signed.text)
        # 2.
        trusted = self.logs.get(cp.origin)
        if trusted is None:
            raise UnknownLog(f"this witness does not follow the log {cp.origin!r}",
                             origin=cp.origin)
        # 3.
        try:
            good = note.verified(signed, trusted)
        except note.NoteError as exc:
            raise NotSignedByLog(exc.message, origin=cp.origin) from None
        if not good:
            raise NotSignedByLog("no signature by a key trusted for this log", origin=cp.origin)
        # 4.
        if request.old_size > cp.size:
            raise WitnessRequestError(
                f"old size {request.old_size} is above the checkpoint size {cp.size}",
                "WITNESS_OLD_SIZE_TOO_LARGE")
        checkpoint_text = request.checkpoint.decode("utf-8")

        def decide(latest: Witnessed | None) -> tuple[Witnessed, str]:
            known = 0 if latest is None else latest.size
            # 5.
            if request.old_size != known:
                raise SizeConflict(f"the latest checkpoint cosigned for {cp.origin!r} has size"
                                   f" {known}, not {request.old_size}", known)
            # 6. and 7.
            if latest is None:
                if request.proof:
                    raise BadProof("the proof must be empty when the old size is 0")
            elif cp.size == latest.size:
                if request.proof:
                    raise BadProof("the proof must be empty when the sizes are equal")
                if cp.root != latest.root:
                    _log.warning("fork: %s size %d has two roots", cp.origin, cp.size)
                    raise SizeConflict(
                        f"a different checkpoint of size {cp.size} was already cosigned for"
                        f" {cp.origin!r}", known, "WITNESS_ROOT_CONFLICT")
            else:
                try:
                    merkle.verify_consistency(latest.size, cp.size, latest.root, cp.root,
                                              request.proof)
                except merkle.MerkleError as exc:
                    _log.warning("inconsistent checkpoint for %s from %d to %d: %s",
                                 cp.origin, latest.size, cp.size, exc.reason)
                    raise BadProof(f"the consistency proof from {latest.size} to {cp.size}"
                                   f" does not verify: {exc.reason}",
                                   old_size=latest.size, size=cp.size) from None
            # 8.
            now = int(self.clock())
            if latest is not None:
                now = max(now, latest.cosigned_at)  # timestamps never go back for a log
            line = note.cosign(signed.text, self.identity.name, self.identity.key, now).line()
            return Witnessed(cp.origin, cp.size, cp.root, checkpoint_text, now), line

        return self.state.update(cp.origin, decide)
