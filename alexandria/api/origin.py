"""The origin this server advertises (the contract's ``origin``, the OpenAPI server URL).

A client believes what these documents say about where the library lives, so it is never taken
from a request header unchecked.  In order:

1. ``--public-url`` (``Origin.public``): what the operator says, e.g. ``https://library.example``
   behind a TLS reverse proxy.  Nothing the request says matters.
2. With ``--trust-proxy-headers`` only (the proxy in front overwrites them, so a client cannot
   forge them): ``X-Forwarded-Proto`` (``http``/``https``) and ``X-Forwarded-Host``, each used
   only when well formed.
3. The scheme the server was reached by and the ``Host`` header when it is a well-formed
   ``host[:port]``; otherwise the address the connection arrived at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

from alexandria.errors import BadRequest

# a DNS name, an IPv4 address or a bracketed IPv6 address, then an optional port
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
    r"[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?\Z"
)


@dataclass(frozen=True)
class Origin:
    public: str | None = None
    trust_proxy_headers: bool = False

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
        host = headers.get("host", "")
        if _HOST.match(host):
            return f"{scheme}://{host.lower()}"
        server = request.scope.get("server")
        if server and server[0]:
            address = f"[{server[0]}]" if ":" in server[0] else server[0]
            return f"{scheme}://{address}:{server[1]}"
        return f"{scheme}://localhost"


def public_url(value: str) -> str:
    """``--public-url``: an http(s) origin, with no user, path, query or fragment."""
    parts = urlsplit(value.strip())
    if (
        parts.scheme not in ("http", "https") or not _HOST.match(parts.netloc)
        or parts.path not in ("", "/") or parts.query or parts.fragment
    ):
        raise BadRequest(
            f"--public-url {value!r} is not an origin like https://library.example[:port]",
            "BAD_PUBLIC_URL",
        )
    return f"{parts.scheme}://{parts.netloc.lower()}"
