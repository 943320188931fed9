"""Who a request came from, for limits per client (``service/enrolment.py``).

Without ``serve --trust-proxy-headers`` it is the peer of the connection, and nothing the
request says changes it.  With the flag the server stands behind a reverse proxy: every
connection comes from the proxy, which appends the address it saw to ``X-Forwarded-For``.
The client is then the right-most hop of ``X-Forwarded-For`` (all its lines, in order): the one
the proxy next to this server wrote.  The hops to its left were written by whoever sent the
request and prove nothing.  (Behind a chain of proxies the right-most hop is the proxy before
the last: the last must send the client's address it resolved itself, as nginx's realip
module does.)  Only when no ``X-Forwarded-For`` arrived is ``Forwarded`` (RFC 7239) read the
same way, by its ``for=`` parameters.  A right-most hop that is not an IP address (``unknown``,
an obfuscated ``_name``, garbage) is not believed: the peer's address stands.

A limit keys an IPv6 client by its /64 (one subscriber's network: a host picks any address in
it), an IPv4 client (or an IPv4-mapped IPv6 one) by its address.
"""

from __future__ import annotations

import ipaddress

from starlette.datastructures import Headers
from starlette.requests import Request

IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_ip(token: str) -> IP | None:
    """An address as proxies write it: ``192.0.2.1``, ``192.0.2.1:4711``, ``2001:db8::1``,
    ``[2001:db8::1]:4711``, optionally in double quotes; None for anything else."""
    text = token.strip().strip('"').strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        text = text[1:end]
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _forwarded_for(headers: Headers) -> list[str]:
    """The hops a proxy chain recorded, left (the first) to right (the last)."""
    xff = headers.getlist("x-forwarded-for")
    if xff:
        return [hop for line in xff for hop in line.split(",")]
    hops = []
    for line in headers.getlist("forwarded"):
        for element in line.split(","):
            for pair in element.split(";"):
                name, _, value = pair.partition("=")
                if name.strip().lower() == "for":
                    hops.append(value)
    return hops


def client_ip(request: Request, trust_proxy_headers: bool) -> IP | None:
    """The client's address (``None``: a transport that has none, as in-process tests)."""
    peer = parse_ip(request.client.host) if request.client else None
    if not trust_proxy_headers:
        return peer
    hops = [hop for hop in _forwarded_for(request.headers) if hop.strip()]
    if not hops:
        return peer
    address = parse_ip(hops[-1])
    return address if address is not None else peer


def client_address(request: Request, trust_proxy_headers: bool) -> tuple[str, str]:
    """``(limit key, address as shown)`` of the request's client."""
    address = client_ip(request, trust_proxy_headers)
    if address is None:
        host = request.client.host if request.client else ""
        return f"peer:{host}", host or "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        network = ipaddress.IPv6Network(f"{address}/64", strict=False)
        return str(network), str(address)
    return str(address), str(address)
