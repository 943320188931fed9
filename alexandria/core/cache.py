"""The one bounded cache type of the package.

Every memo of an unbounded key set — certificates already verified against a genesis
(``trust.CertificateMemo``), what the writer connection remembers between admissions
(``store.writer_memory``), worker certificates rebuilt by the writer process
(``service.writer_service``) — is a ``Bounded`` held by the object whose lifetime it shares,
never a module global: nothing leaks between libraries, tests or processes.

A full cache simply empties itself instead of evicting one entry at a time: its hot entries
(the certificate every envelope of a worker carries, the spaces everyone links to) come back at
the next use, and a lookup stays one ``dict`` access, with no bookkeeping on hits.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Bounded(dict[K, V]):
    """A dict that empties itself instead of growing past ``limit`` entries."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        if limit < 1:
            raise ValueError("a bounded cache holds at least one entry")
        self.limit = limit

    def __setitem__(self, key: K, value: V) -> None:
        if len(self) >= self.limit and key not in self:
            self.clear()
        super().__setitem__(key, value)
