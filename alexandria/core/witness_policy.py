"""Which witnesses a reader trusts, and how many must have cosigned a checkpoint (no IO).

A policy is a set of ``cosignature/v1`` verifier keys and a quorum ``N``: a checkpoint is
accepted when at least ``N`` distinct witnesses of the set cosigned its text.  Cosignature lines
of other keys are ignored; a line that claims a trusted witness key but does not verify rejects
the checkpoint (signed-note).  The library (``--witness NAME=URL+VKEY``) and the verifiers
(``--witness NAME=VKEY``) parse their options here.
"""

from __future__ import annotations

from dataclasses import dataclass

from alexandria.core import note
from alexandria.errors import Invalid, Malformed


class NotWitnessed(Invalid):
    """A checkpoint without the quorum of valid cosignatures a policy asks for."""

    default_code = "CHECKPOINT_NOT_WITNESSED"


@dataclass(frozen=True)
class WitnessPolicy:
    witnesses: tuple[note.Verifier, ...]
    quorum: int

    def __post_init__(self) -> None:
        if not 0 <= self.quorum <= len(self.witnesses):
            raise Malformed(
                f"a witness quorum of {self.quorum} needs at least that many witnesses"
                f" (given {len(self.witnesses)})", "USAGE", quorum=self.quorum,
                witnesses=len(self.witnesses),
            )

    def cosigners(self, signed_note: str | bytes) -> list[note.Cosigned]:
        """The trusted witnesses whose cosignature of ``signed_note`` verifies."""
        return note.verified(note.parse_note(signed_note), self.witnesses)

    def check(self, signed_note: str | bytes, size: int) -> list[note.Cosigned]:
        """The cosigners, or :class:`NotWitnessed` naming the checkpoint (by size) when there
        are fewer than the quorum or one of them does not verify."""
        try:
            found = self.cosigners(signed_note)
        except note.NoteError as exc:
            raise NotWitnessed(f"checkpoint {size}: {exc.reason}", size=size) from None
        if len(found) < self.quorum:
            raise NotWitnessed(
                f"checkpoint {size} carries {len(found)}/{self.quorum} valid cosignatures of"
                " the trusted witnesses", size=size, cosigned_by=[c.verifier.name for c in found],
                quorum=self.quorum,
            )
        return found


def policy_of(witness: list[str], quorum: int | None) -> WitnessPolicy | None:
    """``--witness NAME=VKEY`` … and ``--witness-quorum N`` (default: all given), or None
    without either: what the verifiers and the MCP server take from their options."""
    if not witness and quorum is None:
        return None
    verifiers = tuple(parse_witness_option(w) for w in witness)
    if len({v.vkey for v in verifiers}) != len(verifiers):
        raise Malformed("the same witness key is given twice", "USAGE")
    return WitnessPolicy(verifiers, len(verifiers) if quorum is None else quorum)


def parse_witness_vkey(name: str, vkey: str, option: str) -> note.Verifier:
    verifier = note.parse_vkey(vkey)
    if verifier.name != name or verifier.key_type != note.COSIGNATURE_V1:
        raise Malformed(f"{option}: {vkey!r} is not a cosignature/v1 (type 0x04) key named"
                        f" {name!r}", "USAGE")
    return verifier


def parse_witness_option(value: str) -> note.Verifier:
    """``NAME=VKEY`` (verifiers)."""
    name, eq, vkey = value.partition("=")
    if not eq:
        raise Malformed(f"--witness {value!r}: expected NAME=VKEY", "USAGE")
    return parse_witness_vkey(name, vkey, f"--witness {name}")


def parse_witness_endpoint(value: str) -> tuple[str, note.Verifier]:
    """``NAME=URL+VKEY`` (the library): the URL and the verifier.  The vkey starts with the
    name, so it begins at the last ``+NAME+`` (a URL may hold ``+`` too)."""
    name, eq, rest = value.partition("=")
    at = rest.rfind(f"+{name}+") if eq and name else -1
    if at <= 0:
        raise Malformed(f"--witness {value!r}: expected NAME=URL+VKEY", "USAGE")
    url, vkey = rest[:at], rest[at + 1:]
    if not url.startswith(("http://", "https://")):
        raise Malformed(f"--witness {name}: {url!r} is not an http(s) URL", "USAGE")
    return url.rstrip("/"), parse_witness_vkey(name, vkey, f"--witness {name}")
