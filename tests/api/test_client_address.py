"""The client's address for limits per client (``api/client_address.py``): the peer, or with
``--trust-proxy-headers`` the right-most forwarded hop; IPv6 clients by their /64."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from alexandria.api.client_address import client_address, parse_ip


def _request(peer: str, *headers: tuple[str, str]) -> Request:
    return Request({"type": "http", "client": (peer, 5000), "headers": [
        (k.lower().encode(), v.encode()) for k, v in headers]})


@pytest.mark.parametrize(("token", "address"), [
    ("192.0.2.1", "192.0.2.1"), (" 192.0.2.1:4711 ", "192.0.2.1"), ('"192.0.2.1:80"', "192.0.2.1"),
    ("2001:db8::1", "2001:db8::1"), ('"[2001:db8::1]:4711"', "2001:db8::1"),
    ("::ffff:192.0.2.9", "192.0.2.9"), ("unknown", None), ("_hidden", None), ("[::1", None),
    ("", None), ("999.1.1.1", None),
])
def test_addresses_as_proxies_write_them(token: str, address: str | None) -> None:
    parsed = parse_ip(token)
    assert (None if parsed is None else str(parsed)) == address


def test_the_right_most_hop_only_when_trusted() -> None:
    r = _request("127.0.0.1", ("X-Forwarded-For", "10.0.0.1, 203.0.113.7"),
                 ("X-Forwarded-For", "198.51.100.2"), ("Forwarded", "for=192.0.2.1"))
    assert client_address(r, False) == ("127.0.0.1", "127.0.0.1")
    assert client_address(r, True) == ("198.51.100.2", "198.51.100.2")  # every line, in order
    r = _request("127.0.0.1", ("Forwarded", 'for=192.0.2.1;proto=https, for="[2001:db8::5]"'))
    assert client_address(r, True) == ("2001:db8::/64", "2001:db8::5")
    r = _request("127.0.0.1", ("X-Forwarded-For", "203.0.113.7, garbage"))
    assert client_address(r, True) == ("127.0.0.1", "127.0.0.1")  # not believed: the peer's
    r = _request("2001:db8:aa:bb:1:2:3:4")
    assert client_address(r, False) == ("2001:db8:aa:bb::/64", "2001:db8:aa:bb:1:2:3:4")
