"""The ``changes`` tool's cursor: the library's snapshot cursor plus a position in its page."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import orjson

from alexandria.errors import Malformed


@dataclass(frozen=True)
class ChangesCursor:
    """The MCP ``changes`` cursor: the library's own snapshot cursor (HMAC-protected by the
    library; ``None`` before the first page) and how many items of the page it opens were
    already handed out — a page cut short by ``max_bytes`` is re-read from the same library
    cursor, which always returns the same items (PROTOCOL §5), and the first ``skip`` dropped."""

    root: str
    cursor: str | None
    skip: int

    PREFIX = "mcp1."

    def encode(self) -> str:
        data = orjson.dumps({"c": self.cursor, "r": self.root, "s": self.skip})
        return self.PREFIX + base64.urlsafe_b64encode(data).decode().rstrip("=")

    @classmethod
    def parse(cls, text: str | None, root: str) -> ChangesCursor:
        if text is None:
            return cls(root, None, 0)
        try:
            if not text.startswith(cls.PREFIX):
                raise ValueError("prefix")
            raw = text[len(cls.PREFIX):]
            value = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
            cursor, r, skip = value["c"], value["r"], value["s"]
            if set(value) != {"c", "r", "s"} or not isinstance(r, str) \
                    or not (cursor is None or isinstance(cursor, str)) \
                    or not isinstance(skip, int) or isinstance(skip, bool) or not 0 <= skip <= 50:
                raise ValueError("fields")
        except (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError):
            raise Malformed("cursor is not one this tool returned", "BAD_CURSOR",
                            parameter="cursor") from None
        if r != root:
            raise Malformed("the cursor belongs to another root", "BAD_CURSOR",
                            parameter="cursor", cursor_root=r)
        return cls(root, cursor, skip)
