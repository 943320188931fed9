"""Scripted servers on 127.0.0.1 for tests of clients: a listening socket whose connections
are each handled on a thread of their own."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


def accept_forever(listener: socket.socket, handle: Callable[[socket.socket], None],
                   accepted: Callable[[], None] | None = None) -> None:
    """On a daemon thread, accept on ``listener`` until it is closed, calling ``accepted``
    (if given) and then ``handle(conn)`` on a thread of its own for each connection."""

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if accepted is not None:
                accepted()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def content_length(head: bytes) -> int:
    """The ``content-length`` of a request or response head (0 without one)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0
