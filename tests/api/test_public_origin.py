"""Where the library says it lives: ``--public-url`` and opt-in proxy headers decide
the origin that ``/api/contract`` and ``/api/openapi.json`` advertise, else the address the
server listens on: never the request's ``Host`` header, and no redirect is built from it.  The
CLI warns on plain ``http://`` for anything but this machine.  The live servers run on each
backend (``new_db``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from alexandria.cli.terminal import is_loopback, warn_plain_http
from alexandria.service.bootstrap import Founding
from tests.support.cli import cli
from tests.support.liveserver import NewDb, Server, serving, write_library_files

Files = tuple[Path, Path | str, Path]


@pytest.fixture
def files(tmp_path: Path, founding: Founding, new_db: NewDb) -> Files:
    genesis, log_key = write_library_files(founding, tmp_path)
    return genesis, new_db(tmp_path / "lib.db"), log_key


@pytest.fixture
def plain(files: Files) -> Iterator[Server]:
    with serving(*files) as s:
        yield s


def _origins(server: Server, headers: dict[str, str]) -> tuple[str, str]:
    contract = httpx.get(f"{server.url}/api/contract", headers=headers).json()
    openapi = httpx.get(f"{server.url}/api/openapi.json", headers=headers).json()
    return contract["origin"], openapi["servers"][0]["url"]


FORGED = {"host": "evil.example", "x-forwarded-proto": "https",
          "x-forwarded-host": "evil.example"}


def test_the_public_url_is_advertised_whatever_the_request_says(
    files: Files
) -> None:
    with serving(*files, extra=("--public-url", "https://Library.Example/")) as s:
        for headers in ({}, FORGED):
            assert _origins(s, headers) == ("https://library.example",) * 2


def test_proxy_headers_count_only_when_trusted(files: Files) -> None:
    with serving(*files, extra=("--trust-proxy-headers",)) as s:
        assert _origins(s, FORGED) == ("https://evil.example",) * 2
        # malformed: the address the server listens on, never the Host header
        bad = {"x-forwarded-proto": "gopher", "x-forwarded-host": "a/b@c", "host": "lib.test"}
        assert _origins(s, bad) == (s.url,) * 2


def test_without_either_the_listening_address_is_advertised(plain: Server) -> None:
    """A well-formed ``Host`` of the client's choosing is not where the library lives: a
    shared cache in front would hand the forged origin to every later reader."""
    assert _origins(plain, {}) == (plain.url,) * 2
    assert _origins(plain, FORGED) == (plain.url,) * 2
    for host in ("evil.example", "evil.example:8443", "[::1]:1", "evil.example/path", "a@b",
                 "x y", "evil.example:99999999"):
        assert _origins(plain, {"host": host}) == (plain.url,) * 2, host


def test_no_redirect_is_built_from_the_host_header(plain: Server) -> None:
    r = httpx.get(f"{plain.url}/api/genesis/", headers={"host": "evil.example"})
    assert r.status_code == 404
    assert "location" not in r.headers
    assert r.json()["code"] == "NOT_FOUND"


def test_a_public_url_that_is_not_an_origin_is_refused(files: Files) -> None:
    for bad in ("ftp://x.example", "https://x.example/path", "https://u:p@x.example",
                "library.example"):
        genesis, db, _key = files
        r = cli("serve", "--genesis", str(genesis), "--db", str(db), "--port", "1",
                "--public-url", bad, expect=1)
        assert "BAD_PUBLIC_URL" in r.stderr


def test_the_cli_warns_on_plain_http_beyond_this_machine(
    capsys: pytest.CaptureFixture[str]
) -> None:
    for url in ("http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:8", "https://a.b"):
        warn_plain_http(url)
        assert capsys.readouterr().err == "", url
    warn_plain_http("http://library.example")
    assert "plain http" in capsys.readouterr().err
    assert is_loopback("http://127.8.9.10") and not is_loopback("http://10.0.0.1")
