"""The largest checkpoint served, kept beside the log key: the signer never signs a tree that
does not extend it, and a database behind it takes no writes (``service/published.py``)."""

from __future__ import annotations

import pytest

from alexandria.api.serve import auto_workers
from alexandria.api.status import status_of
from alexandria.core.checkpoint import Checkpoint, parse_checkpoint, sign_checkpoint
from alexandria.service.bootstrap import Founding
from alexandria.service.library import Library
from alexandria.service.published import CatchUpRequired
from alexandria.store.backends import storage_for
from tests.support.admission import claim, space
from tests.support.library import Api


async def test_a_served_checkpoint_is_remembered_before_it_is_served(guarded: Api) -> None:
    root = (await guarded.publish("owner", space()))["id"]
    await guarded.publish("owner", claim(root))
    note = (await guarded.client.get("/api/log/checkpoint")).text
    keeper = guarded.library.published
    assert keeper is not None and keeper.path.name == "log.key.published"
    remembered = keeper.load()
    assert remembered is not None and remembered.note == note and remembered.size == 4
    assert keeper.path.stat().st_mode & 0o777 == 0o600
    keeper.record(3, "older notes are never written over larger ones")
    assert keeper.load() == remembered


async def test_the_signer_refuses_a_tree_that_does_not_extend_the_published_one(
    guarded: Api, founding: Founding
) -> None:
    root = (await guarded.publish("owner", space()))["id"]
    assert (await guarded.client.get("/api/log/checkpoint")).status_code == 200
    keeper = guarded.library.published
    assert keeper is not None
    # what another history of this library would have published at this size
    forged = sign_checkpoint(Checkpoint(founding.genesis.origin, 3, b"\x07" * 32),
                             founding.log_key)
    keeper.path.write_text(forged)
    await guarded.publish("owner", claim(root))
    r = await guarded.client.get("/api/log/checkpoint")
    assert r.status_code == 503 and r.json()["code"] == "LOG_FORKED", r.text
    assert r.json()["details"]["published_size"] == 3
    # and a published checkpoint beyond the tree: behind, writes refused until caught up
    ahead = sign_checkpoint(Checkpoint(founding.genesis.origin, 40, b"\x07" * 32),
                            founding.log_key)
    keeper.path.write_text(ahead)
    assert parse_checkpoint(ahead)[0].size == 40
    first = guarded.library.storage
    second = Library(founding.genesis, storage_for(getattr(first, "url", first.path),
                                                   founding.genesis),
                     founding.log_key, published=keeper)
    await second.open()
    try:
        with pytest.raises(CatchUpRequired) as refused:
            await second.check_writable()
        assert status_of(refused.value) == 503
        assert refused.value.details == {"published_size": 40, "tree_size": 4}
        status = await second.status()
        assert not status.ready and "catching up" in status.reasons[0]
    finally:
        await second.close()


def test_serve_uses_the_cores_it_may_run_on() -> None:
    assert auto_workers(1) == 1
    assert auto_workers(2) == 2
    assert auto_workers(4) == 4
    assert auto_workers(64) == 8
