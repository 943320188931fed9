"""Storage behaviour that the HTTP tests do not pin down."""

from __future__ import annotations

from alexandria.timestamps import parse_ms
from tests.conftest import Api


def _claim(title: str) -> dict[str, object]:
    return {
        "kind": "claim",
        "title": title,
        "links": [],
        "previous": "",
        "body": {"statement": title, "scope": "Tests", "assumptions": []},
    }


async def test_admitted_at_never_decreases_when_the_clock_steps_back(api: Api) -> None:
    first = await api.publish("owner", _claim("First"))
    api.clock.ms -= 3_600_000  # the server clock steps back an hour
    env = api.envelope("owner", _claim("Second"), authored_at=api.clock.tick(1))
    r = await api.post(env)
    assert r.status_code == 201, r.text
    second = r.json()
    a = parse_ms(first["admission"]["admitted_at"])
    b = parse_ms(second["admission"]["admitted_at"])
    assert a is not None and b is not None and b >= a
    assert second["admission"]["sequence"] == first["admission"]["sequence"] + 1


async def test_signed_record_from_memory_equals_the_stored_one(api: Api) -> None:
    r = await api.post(api.envelope("peer", _claim("Spliced")))
    assert r.status_code == 201
    stored = await api.client.get(f"/api/entries/{r.json()['id']}")
    assert stored.content == r.content
