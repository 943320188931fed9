"""Filling a library's log through the real app and reading its checkpoint."""

from __future__ import annotations

from typing import Any

from alexandria.core.checkpoint import verify_checkpoint
from tests.support.library import Api


def discussion(i: int, text: str = "hello") -> dict[str, Any]:
    return {"kind": "discussion", "title": f"Discussion {i}", "body": {"text": text},
            "links": [], "previous": ""}


async def publish_many(api: Api, n: int, text: str = "hello") -> None:
    for i in range(n):
        await api.publish("owner", discussion(i, text))


async def checkpoint(api: Api) -> tuple[int, bytes, str]:
    r = await api.client.get("/api/log/checkpoint")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    f = api.founding
    cp = verify_checkpoint(r.text, f.genesis.origin, f.log_key.public_hex)
    return cp.size, cp.root, r.text
