"""The origin this server advertises (the contract's ``origin``, the OpenAPI server URL).

A client believes what these documents say about where the library lives, so it is never taken
from a request header unchecked.  In order:

1. ``--public-url`` (``Origin.public``): what the operator says, e.g. ``https://library.example``
   behind a TLS reverse proxy.  Nothing the request says matters.
2. With ``--trust-proxy-headers`` only (the proxy in front overwrites them, so a client cannot
   forge them): ``X-Forwarded-Proto`` (``http``/``https``) and ``X-Forwarded-Host``, each used
   only when well formed.
3. The address the server listens on (``Origin.listen``: ``serve --host/--port``), else, when it
   listens on every address, the local address the connection arrived at.  Never the request's
   ``Host`` header: any client can send any well-formed name there, and a cache or a proxy in
   front would hand the forged origin to every later reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

from alexandria.errors import Malformed

# a DNS name, an IPv4 address or a bracketed IPv6 address, then an optional port
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
    r"[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?\Z"
)
#: hosts that mean "every address": the connection's own local address names the server
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class Origin:
    public: str | None = None
    trust_proxy_headers: bool = False
    #: ``http://host:port`` the server listens on (``listen_url``), None when unknown
    listen: str | None = None

    def of(self, request: Request) -> str:
        if self.public is not None:
            return self.public
        headers = request.headers
        scheme = request.url.scheme if request.url.scheme in ("http", "https") else "http"
        if self.trust_proxy_headers:
            proto = headers.get("x-forwarded-proto", "").strip().lower()
            scheme = proto if proto in ("http", "https") else scheme
            forwarded = headers.get("x-forwarded-host", "").strip()
            if _HOST.match(forwarded):
                return f"{scheme}://{forwarded.lower()}"
        if self.listen is not None:
            return self.listen
        server = request.scope.get("server")
        if server and server[0]:
            address = f"[{server[0]}]" if ":" in server[0] else server[0]
            return f"{scheme}://{address}" + ("" if server[1] is None else f":{server[1]}")
        return f"{scheme}://localhost"


def listen_url(host: str, port: int) -> str | None:
    """The origin of a server listening on ``host``:``port``; None for a wildcard address (the
    connection's local address is used then)."""
    if host in _WILDCARDS:
        return None
    address = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{address.lower()}:{port}"


def public_url(value: str) -> str:
    """``--public-url``: an http(s) origin, with no user, path, query or fragment."""
    parts = urlsplit(value.strip())
    if (
        parts.scheme not in ("http", "https") or not _HOST.match(parts.netloc)
        or parts.path not in ("", "/") or parts.query or parts.fragment
    ):
        raise Malformed(
            f"--public-url {value!r} is not an origin like https://library.example[:port]",
            "BAD_PUBLIC_URL",
        )
    return f"{parts.scheme}://{parts.netloc.lower()}"
