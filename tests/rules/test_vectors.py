"""The signed test vectors in tests/vectors/: regenerated from their fixed seeds and timestamps
they are byte for byte what is checked in, and replayed in index order through the real HTTP
app each one gets exactly the status and error code its index entry names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from alexandria.api.app import create_app
from alexandria.core import merkle
from alexandria.core.canonical import canonical
from alexandria.core.trust import Genesis
from alexandria.service.library import Library
from alexandria.store.backends import storage_for
from alexandria.store.merkle_nodes import node_reader
from tests.support.library import CONTRACT, Clock
from tests.vectors import generate

VECTORS = Path(generate.__file__).resolve().parent
INDEX: dict[str, Any] = json.loads((VECTORS / "index.json").read_text(encoding="utf-8"))
LEAVES: dict[str, Any] = json.loads((VECTORS / "log_leaves.json").read_text(encoding="utf-8"))


def test_vectors_regenerate_byte_for_byte(tmp_path: Path) -> None:
    generate.write(tmp_path)
    fresh = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    checked_in = {p.name: p.read_bytes() for p in VECTORS.glob("*.json")}
    assert sorted(fresh) == sorted(checked_in)
    changed = [name for name in fresh if fresh[name] != checked_in[name]]
    assert not changed, f"regenerate with `python -m tests.vectors.generate`: {changed}"


def test_vectors_use_the_contracts_worked_example() -> None:
    assert CONTRACT["object_examples"]["steps"] == generate.WORKED_EXAMPLE


def test_every_vector_file_is_replayed_or_referenced() -> None:
    replayed = {step["file"] for step in INDEX["steps"]}
    referenced = {INDEX["genesis"], "index.json", "worker_certificate_peer.json",
                  "log_leaves.json"}
    assert {p.name for p in VECTORS.glob("*.json")} == replayed | referenced
    names = [step["file"] for step in INDEX["steps"] if step["status"] >= 400]
    assert len(names) == len(set(names)), "each broken vector breaks one thing once"
    for step in INDEX["steps"]:
        assert (step["code"] is None) == (step["status"] < 400), step


async def test_vectors_replay_with_their_expected_status_and_code(db: Path | str) -> None:
    genesis_doc = json.loads((VECTORS / INDEX["genesis"]).read_bytes())
    genesis = Genesis.from_document(genesis_doc, pin=INDEX["pin"])
    storage = storage_for(db, genesis)
    storage.clock = Clock(INDEX["server_time"])
    library = Library(genesis, storage)
    app = create_app(library)
    transport = httpx.ASGITransport(app=app)
    admitted: dict[str, bytes] = {}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as client,
    ):
        for step in INDEX["steps"]:
            data = (VECTORS / step["file"]).read_bytes()
            size = await storage.log_size()
            r = await client.post(step["route"], content=data)
            what = (step["file"], step["breaks"], r.text[:300])
            assert r.status_code == step["status"], what
            if step["status"] >= 400:
                assert r.json()["code"] == step["code"], what
                assert await storage.log_size() == size, what
            elif step["status"] == 201:
                assert await storage.log_size() == size + 1, what
                if step["route"] == "/api/entries":
                    admitted[step["file"]] = r.content
                    assert r.content == canonical(r.json())
            else:
                assert await storage.log_size() == size, what
        # every admitted envelope is still answered, unchanged, by an exact retry
        for name, first in admitted.items():
            r = await client.post("/api/entries", content=(VECTORS / name).read_bytes())
            assert r.status_code == 200 and r.content == first, name
        # the log it built is, byte for byte, the one log_leaves.json describes
        size = await storage.log_size()
        r = await client.get("/api/log/entries", params={"start": 0, "end": size})
        served = r.json()["entries"]
        root = await storage.read(lambda conn: merkle.root_hash(size, node_reader(conn)))
    expected = LEAVES["entries"]
    assert size == LEAVES["size"] == len(expected) == len(served)
    for e, got in zip(expected, served, strict=True):
        assert (got["sequence"], got["type"]) == (e["sequence"], e["type"])
        assert canonical(got["leaf"]) == e["leaf"].encode("utf-8"), e["file"]
        assert merkle.leaf_hash(e["leaf"].encode("utf-8")).hex() == e["leaf_hash"]
        assert canonical(got["leaf"]["document"]) + b"\n" == (VECTORS / e["file"]).read_bytes()
    assert root.hex() == LEAVES["root"]
