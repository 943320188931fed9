"""The contract's 12 object_examples, published in order through the real HTTP app."""

from __future__ import annotations

import json

from alexandria.service.bootstrap import resolve_refs
from tests.support.library import CONTRACT, Api


async def test_worked_example_admits_and_retries_are_idempotent(api: Api) -> None:
    names: dict[str, str] = {}
    sent = []
    for step in CONTRACT["object_examples"]["steps"]:
        content = resolve_refs(step["content"], names)
        env = api.envelope(step["actor"], content)
        r = await api.post(env)
        assert r.status_code == 201, (step["name"], r.text)
        signed = r.json()
        names[step["name"]] = signed["id"]
        assert signed["record"] == env["record"]
        assert signed["admission"]["sequence"] == len(sent) + 3  # two authority documents first
        sent.append((env, r.content))
    size = await api.library.storage.log_size()
    for env, first in sent:
        r = await api.post(env)
        assert r.status_code == 200
        assert r.content == first
        got = await api.client.get(f"/api/entries/{json.loads(first)['id']}")
        assert got.status_code == 200 and got.content == first
    assert await api.library.storage.log_size() == size
    head = await api.client.get(f"/api/entries/{names['claim']}/head")
    assert head.json()["id"] == names["merge"]
