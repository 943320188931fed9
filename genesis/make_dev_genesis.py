"""Regenerate ``genesis/dev-genesis.json``: the development library's genesis.

    .venv/bin/python genesis/make_dev_genesis.py [--check]

Its keys derive from a PUBLIC seed (``alexandria-dev``), so anyone can sign for it: it exists
for tests, examples and local experiments, never for a real library.  ``--check`` exits 1 when
the committed file differs from what this script produces.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from alexandria.service.bootstrap import found_library

HERE = Path(__file__).resolve().parent
DEV_SEED = b"alexandria-dev"
DEV_CREATED_AT = "2026-01-01T00:00:00.000Z"


def dev_genesis_bytes() -> bytes:
    founding = found_library(
        library="alexandria-dev",
        origin="localhost/alexandria-dev/log",
        created_at=DEV_CREATED_AT,
        seed=DEV_SEED,
        roots=3,
        threshold=2,
    )
    return orjson.dumps(founding.genesis_document, option=orjson.OPT_INDENT_2) + b"\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    target = HERE / "dev-genesis.json"
    data = dev_genesis_bytes()
    if args.check:
        return 0 if target.exists() and target.read_bytes() == data else 1
    target.write_bytes(data)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
