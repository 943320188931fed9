"""``python cli.py …`` behaves exactly as ``alexandria …``."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from alexandria.cli import main as alexandria_main

    return alexandria_main(argv)


if __name__ == "__main__":
    sys.exit(main())
