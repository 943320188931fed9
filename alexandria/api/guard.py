"""What every request passes first, before any route: the head's size, and the pace of the
refusals a client gets.

**Head size.**  A request head (request line and header fields) of more than
``HEAD_LIMIT_BYTES`` is answered ``431 HEAD_TOO_LARGE`` and its connection closed.  Granian
stops reading a head whose buffer has reached the same size (``service/front_end.py``), but its
buffer grows by whole reads: a head sent in one piece can pass it up to nearly twice the size.
Here the head is measured as it arrived (the request line and each field as
``name: value\\r\\n``), so every head beyond the limit is refused, whichever way it came.

**Refusals paced per client.**  A hostile client that sends its next request the moment the
last is answered sets its own rate by how fast the server refuses it: refused in a tenth of a
millisecond, a few hundred such connections ask tens of thousands of times a second, and the
refusals alone take the cores every other client needs.  So each client address
(``client_address.py``: an IPv6 client by its /64, the proxy's forwarded address with
``serve --trust-proxy-headers``) has ``REFUSAL_BURST`` refusals answered at once, refilled at
``REFUSALS_PER_S`` a second.  An answer of status 400 or more beyond that budget is held
``HOLD_S`` before it is sent — an ``asyncio`` sleep: no CPU — and closes its connection
(``Connection: close``), so a flood of refused requests gets one answer per connection every
``HOLD_S``, whatever its number of clients.  The answer is the one the route gave: its typed
code, and ``Retry-After`` where it has one.

Only refusals are ever held: a successful answer is never delayed or refused here, so one
client's flood neither fails nor slows another's requests, even when they share an address (a
NAT, a proxy without ``--trust-proxy-headers``).  At most ``MAX_HELD`` answers are held at once
in a worker process (each holds a connection and a task); beyond that, a refusal over budget is
sent at once, still closing its connection.  At most ``MAX_CLIENTS`` addresses are remembered
per worker process, the one refused least recently forgotten first.  Each worker process keeps
its own budgets.
"""

from __future__ import annotations

import asyncio
import time

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from alexandria.api.client_address import client_address
from alexandria.api.http import error_response
from alexandria.errors import HeadTooLarge
from alexandria.service.front_end import HEAD_BUFFER_BYTES

#: the largest request head answered (request line and header fields, as sent)
HEAD_LIMIT_BYTES = HEAD_BUFFER_BYTES
#: refusals a client address gets at once, then ``REFUSALS_PER_S`` a second
REFUSAL_BURST = 20
REFUSALS_PER_S = 0.2
#: refusals all clients together get at once, then ``ALL_REFUSALS_PER_S`` a second
ALL_REFUSAL_BURST = 100
ALL_REFUSALS_PER_S = 20.0
#: how long a refusal over budget is held before it is sent
HOLD_S = 2.0
#: refusals held at once, at most, per worker process
MAX_HELD = 1024
#: client addresses remembered, at most, per worker process
MAX_CLIENTS = 50_000

_HTTP_VERSION = len(b" HTTP/1.1\r\n")


def head_bytes(scope: Scope) -> int:
    """The size of the request's head as it arrived: its request line, each header field as
    ``name: value\\r\\n``, and the empty line."""
    path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string") or b""
    size = len(scope["method"]) + 1 + len(path) + (1 + len(query) if query else 0)
    size += _HTTP_VERSION + 2
    for name, value in scope["headers"]:
        size += len(name) + len(value) + 4
    return size


def refusal_budgets(burst: int | None) -> RefusalBudgets:
    """The budgets of ``serve --refusal-burst``: ``burst`` refusals per client answered at
    once (and five times as many for all clients together, at least the default's), refilled
    at the default pace; None: the defaults."""
    if burst is None:
        return RefusalBudgets()
    return RefusalBudgets(burst=burst, total_burst=max(ALL_REFUSAL_BURST, 5 * burst))


class RefusalBudgets:
    """Refusals answered at once: per client a bucket of ``burst``, refilled at ``per_second``,
    and one bucket of ``total_burst`` for all clients together, refilled at
    ``total_per_second`` (a flood from many addresses, each within its own budget).  One event
    loop uses it, so plain values suffice; the dict's order is the order of last use."""

    def __init__(self, burst: float = REFUSAL_BURST, per_second: float = REFUSALS_PER_S,
                 total_burst: float = ALL_REFUSAL_BURST,
                 total_per_second: float = ALL_REFUSALS_PER_S,
                 max_clients: int = MAX_CLIENTS) -> None:
        self.burst = burst
        self.per_second = per_second
        self.total_burst = total_burst
        self.total_per_second = total_per_second
        self.max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}
        self._all = (total_burst, time.monotonic())

    def take(self, client: str, now: float) -> bool:
        """One refusal for ``client``: True when it is within both budgets (and spends them)."""
        tokens, at = self._buckets.pop(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.per_second)
        total, total_at = self._all
        total = min(self.total_burst, total + max(0.0, now - total_at) * self.total_per_second)
        within = tokens >= 1.0 and total >= 1.0
        if within:
            tokens, total = tokens - 1.0, total - 1.0
        self._buckets[client] = (tokens, now)
        self._all = (total, now)
        if len(self._buckets) > self.max_clients:
            del self._buckets[next(iter(self._buckets))]
        return within

    def __len__(self) -> int:
        return len(self._buckets)


class Guard:
    """ASGI middleware, outermost: the head limit, then refusals paced per client (``budgets``;
    None: never held)."""

    def __init__(self, app: ASGIApp, trust_proxy_headers: bool = False,
                 budgets: RefusalBudgets | None = None, hold_s: float = HOLD_S,
                 max_held: int = MAX_HELD, head_limit: int = HEAD_LIMIT_BYTES) -> None:
        self.app = app
        self.trust_proxy_headers = trust_proxy_headers
        self.budgets = budgets
        self.hold_s = hold_s
        self.max_held = max_held
        self.head_limit = head_limit
        self.held = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: list[Message] = []  # a refusal to send once held: its messages, start first

        async def paced(message: Message) -> None:
            if held:
                held.append(message)
            elif (message["type"] == "http.response.start" and message["status"] >= 400
                    and self.budgets is not None and self._over_budget(scope)):
                headers = [(k, v) for k, v in message.get("headers", ())
                           if k.lower() != b"connection"]
                held.append({**message, "headers": [*headers, (b"connection", b"close")]})
            else:
                await send(message)

        size = head_bytes(scope)
        if size > self.head_limit:
            refusal = HeadTooLarge(
                f"the request head is {size} bytes; at most {self.head_limit} are read",
                limit=self.head_limit)
            await error_response(refusal, {"Connection": "close"})(scope, receive, paced)
        else:
            await self.app(scope, receive, paced)
        if held:  # the route has finished and let go of whatever it held: now the wait
            if self.held < self.max_held:
                self.held += 1
                try:
                    await asyncio.sleep(self.hold_s)
                finally:
                    self.held -= 1
            for message in held:
                await send(message)

    def _over_budget(self, scope: Scope) -> bool:
        assert self.budgets is not None
        client, _shown = client_address(Request(scope), self.trust_proxy_headers)
        return not self.budgets.take(client, time.monotonic())
