"""The state rules through the real HTTP app, one case per status they answer, on each backend:
201 for an admission (200 for its dry run), 409 for a conflict with the ledger's state, 422 for
a violated rule — with the error body of PROTOCOL §6, the same verdict on ``?dry_run=true`` and
nothing stored.  Every rule's cases are proven on the rules alone in ``test_state_rules.py``."""

from __future__ import annotations

from tests.support.admission import accept, claim, link, reject, revise, space
from tests.support.library import Api


async def test_an_admission_is_201_and_its_dry_run_200(api: Api) -> None:
    s = await accept(api, "owner", space(), dry_run=True)
    await accept(api, "peer", claim(s, link("cites", s)), dry_run=True)


async def test_a_conflict_with_the_ledger_is_409(api: Api) -> None:
    first = claim()
    c = await accept(api, "owner", first)
    c2 = await accept(api, "owner", revise(first, c, title="Second"))
    body = await reject(api, "owner", revise(first, c, title="Stale"), 409, "HEAD_CONFLICT")
    assert body["details"] == {"head": c2, "root": c}


async def test_a_violated_rule_is_422(api: Api) -> None:
    missing = "f" * 64
    body = await reject(api, "owner", space("Sub", missing), 422, "LINK_TARGET_MISSING")
    assert body["details"]["target"] == missing
