"""What the tests share about a library: the repository and its contract, the seeded founding,
a controllable clock, and the real app behind an HTTP client (``Api``) on a fresh database.
The pytest fixtures built from these are in ``tests/conftest.py``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from alexandria.api.app import create_app
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.service.bootstrap import Founding
from alexandria.service.library import Library
from alexandria.service.published import PublishedCheckpoint
from alexandria.store.backends import storage_for

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = json.loads((ROOT / "contracts" / "alexandria-contract.json").read_text())
SEED = b"alexandria-test-seed"
T0 = "2026-01-01T00:00:00.000Z"


class Clock:
    """A controllable server clock (milliseconds)."""

    def __init__(self, start: str = "2026-06-01T00:00:00.000Z") -> None:
        ms = parse_ms(start)
        assert ms is not None
        self.ms = ms

    def __call__(self) -> int:
        return self.ms

    def tick(self, ms: int = 1000) -> str:
        self.ms += ms
        return format_ms(self.ms)

    def now(self) -> str:
        return format_ms(self.ms)


class Api:
    """A black-box client of the real app, with helpers to publish as participants."""

    def __init__(
        self, client: httpx.AsyncClient, founding: Founding, clock: Clock, library: Library
    ) -> None:
        self.client = client
        self.founding = founding
        self.clock = clock
        self.library = library

    def envelope(
        self, who: str, content: dict[str, Any], authored_at: str | None = None
    ) -> dict[str, Any]:
        p = self.founding.participants[who]
        return p.envelope(self.founding.genesis, content, authored_at or self.clock.tick())

    async def post(self, envelope: Any, **params: str) -> httpx.Response:
        data = envelope if isinstance(envelope, bytes) else json.dumps(envelope).encode()
        return await self.client.post("/api/entries", content=data, params=params)

    async def publish(self, who: str, content: dict[str, Any], expect: int = 201) -> dict[str, Any]:
        r = await self.post(self.envelope(who, content))
        assert r.status_code == expect, r.text
        out: dict[str, Any] = r.json()
        return out


async def serve_library(
    tmp_path: Path, founding: Founding, clock: Clock,
    documents: list[dict[str, Any]] | None = None, db: str | Path | None = None,
    published: PublishedCheckpoint | None = None,
) -> AsyncIterator[Api]:
    """The real app over a fresh database (``db``: a PostgreSQL URL, or by default
    ``tmp_path/lib.db``), its authority documents admitted (by default the founding's own),
    its log key keeping ``published`` if given."""
    storage = storage_for(db or tmp_path / "lib.db", founding.genesis)
    storage.clock = clock
    library = Library(founding.genesis, storage, founding.log_key, published=published)
    app = create_app(library)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as client,
    ):
        for doc in founding.authority_documents() if documents is None else documents:
            r = await client.post("/api/authority", json=doc)
            assert r.status_code == 201, r.text
        yield Api(client, founding, clock, library)


BACKENDS = ("sqlite", "postgresql")
