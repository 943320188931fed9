"""One signed record against the pinned genesis (``rules.signed.check_signed_record``, used by
``alexandria get`` and ``alexandria verify --entry``): genuine records pass; each fault is
refused with the code the server's admission gives the same fault."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from alexandria.api.status import status_of
from alexandria.cli.session import body_of
from alexandria.core.canonical import canonical
from alexandria.core.leaf import leaf_bytes
from alexandria.core.records import revision_id
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.errors import AlexandriaError
from alexandria.rules.admission import prepare
from alexandria.rules.signed import check_signed_record
from alexandria.service.bootstrap import Founding, found_library
from alexandria.store.interface import Admitted
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.sqlite import sqlite_storage
from tests.support.admission import claim, reply
from tests.support.library import SEED, T0, Clock

SHORT_UNTIL = "2026-07-01T00:00:00.000Z"  # the "short" worker's certificate ends here


@pytest.fixture
def founding() -> Founding:
    f = found_library(seed=SEED, created_at=T0)
    f.enroll("owner")
    f.enroll("peer")
    f.enroll("short", not_after=SHORT_UNTIL)
    return f


class Server:
    def __init__(self, storage: LedgerStorage, founding: Founding, clock: Clock) -> None:
        self.storage, self.founding, self.clock = storage, founding, clock

    def envelope(self, who: str, content: dict[str, Any]) -> dict[str, Any]:
        p = self.founding.participants[who]
        return p.envelope(self.founding.genesis, content, self.clock.tick())

    async def code_of(self, envelope: dict[str, Any]) -> str | None:
        """What the server's admission answers to ``envelope``: None when admitted."""
        try:
            result = await self.storage.admit(prepare(canonical(envelope),
                                                      self.founding.genesis))
        except AlexandriaError as exc:
            return exc.code
        assert isinstance(result, Admitted)
        return None

    async def publish(self, who: str, content: dict[str, Any]) -> dict[str, Any]:
        env = self.envelope(who, content)
        assert await self.code_of(env) is None
        data = await self.storage.entry(revision_id(env["record"]))
        assert data is not None
        signed: dict[str, Any] = json.loads(data)
        return signed


@pytest.fixture
async def server(tmp_path: Path, founding: Founding) -> AsyncIterator[Server]:
    clock = Clock()
    storage = sqlite_storage(tmp_path / "lib.db", founding.genesis)
    storage.clock = clock
    await storage.open()
    try:
        for doc in founding.authority_documents():
            await storage.admit_authority(doc)
        yield Server(storage, founding, clock)
    finally:
        await storage.close()


def refused(signed: Any, founding: Founding) -> tuple[int, str]:
    with pytest.raises(AlexandriaError) as caught:
        check_signed_record(signed, founding.genesis)
    return status_of(caught.value), caught.value.code


def changed(signed: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    out = copy.deepcopy(signed)
    change(out)
    return out


async def test_a_genuine_signed_record_passes(server: Server, founding: Founding) -> None:
    signed = await server.publish("owner", claim())
    checked = check_signed_record(signed, founding.genesis)
    assert checked.id == signed["id"]
    assert checked.sequence == signed["admission"]["sequence"] == 3
    assert checked.leaf == leaf_bytes(
        signed["admission"]["admitted_at"],
        canonical({"record": signed["record"], "signature": signed["signature"]}),
    )
    assert checked.authority.key == founding.authority.public_hex


async def test_an_id_that_is_not_the_records_hash(server: Server, founding: Founding) -> None:
    signed = await server.publish("owner", claim())
    wrong = changed(signed, lambda s: s.update(id="ab" * 32))
    assert refused(wrong, founding) == (403, "REVISION_MISMATCH")


async def test_envelope_faults_get_the_servers_codes(server: Server, founding: Founding) -> None:
    """The proof and the author: the same fault in an envelope sent to the server and in a
    signed record checked by a reader is refused with one code."""
    signed = await server.publish("owner", claim())
    owner, peer = founding.participants["owner"], founding.participants["peer"]

    # a proof that is not the worker's signature
    def bad_proof(s: dict[str, Any]) -> None:
        s["signature"]["proof"] = peer.worker.sign(canonical(s["record"]))

    tampered = changed(signed, bad_proof)
    envelope = {"record": tampered["record"], "signature": tampered["signature"]}
    assert await server.code_of(envelope) == "PROOF_INVALID"
    assert refused(tampered, founding) == (403, "PROOF_INVALID")

    # an author who is not the certified actor, signed by the worker, id consistent
    def other_author(s: dict[str, Any]) -> None:
        s["record"]["author"] = peer.actor
        s["signature"]["proof"] = owner.worker.sign(canonical(s["record"]))
        s["id"] = revision_id(s["record"])

    tampered = changed(signed, other_author)
    envelope = {"record": tampered["record"], "signature": tampered["signature"]}
    assert await server.code_of(envelope) == "AUTHOR_NOT_CERTIFIED"
    assert refused(tampered, founding) == (403, "AUTHOR_NOT_CERTIFIED")


async def test_the_admissions_authority_must_vouch_at_admission(
    server: Server, founding: Founding,
) -> None:
    signed = await server.publish("owner", claim())
    # the log key's certificate did not issue the worker certificate
    wrong = changed(signed, lambda s: s["admission"].update(authority=founding.log_certificate))
    assert refused(wrong, founding) == (403, "AUTHORITY_UNKNOWN")
    # admitted after the authority certificate ended
    end = parse_ms(founding.not_after)
    assert end is not None
    late = changed(signed, lambda s: s["admission"].update(admitted_at=format_ms(end + 1)))
    assert refused(late, founding) == (403, "AUTHORITY_EXPIRED")
    # a worker certificate that ended before the recorded admission
    short = await server.publish("short", claim(title="Short"))
    after = parse_ms(SHORT_UNTIL)
    assert after is not None
    late = changed(short, lambda s: s["admission"].update(admitted_at=format_ms(after + 1)))
    assert refused(late, founding) == (403, "CERTIFICATE_EXPIRED")


async def test_a_signed_record_of_another_shape(server: Server, founding: Founding) -> None:
    signed = await server.publish("owner", claim())
    assert refused([signed], founding) == (400, "SIGNED_RECORD_SHAPE")
    assert refused(changed(signed, lambda s: s.pop("admission")), founding) == (
        400, "SIGNED_RECORD_SHAPE")
    assert refused(changed(signed, lambda s: s["admission"].update(sequence=0)), founding) == (
        400, "SIGNED_RECORD_SHAPE")


async def test_body_of_decodes_by_kind_not_by_a_leading_brace(server: Server) -> None:
    """A reply whose text happens to read as JSON is shown as the text it is."""
    c = await server.publish("owner", claim())
    assert body_of(c["record"]) == {"statement": "One plus one equals two",
                                    "scope": "Naturals", "assumptions": []}
    d = await server.publish("owner", {"kind": "discussion", "title": "D",
                                       "body": {"text": "?"}, "links": [], "previous": ""})
    r = await server.publish("peer", reply({"relation": "replies_to", "target": d["id"]},
                                           text='{"a":1}'))
    assert body_of(r["record"]) == '{"a":1}'
