"""``Server-Timing`` tells anyone how long the server worked on a request (a timing oracle for
what a page holds): a live server sends it only when its operator asks (``serve
--server-timing``)."""

from __future__ import annotations

from pathlib import Path

import httpx

from alexandria.service.bootstrap import Founding
from tests.support.liveserver import serving, write_library_files

PATHS = ("/", "/log", "/objects/" + "ab" * 32, "/api/genesis", "/api/catalogue")


def _timings(url: str) -> list[str | None]:
    return [httpx.get(url + path).headers.get("server-timing") for path in PATHS]


def test_server_timing_only_when_the_operator_asks(tmp_path: Path, founding: Founding) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    db = tmp_path / "lib.db"
    with serving(genesis, db, log_key) as server:
        assert _timings(server.url) == [None] * len(PATHS)
    with serving(genesis, db, log_key, extra=("--server-timing",)) as server:
        pages = _timings(server.url)[:3]  # the HTML pages say it, found or not
        assert all(t is not None and t.startswith("app;dur=") for t in pages), pages
