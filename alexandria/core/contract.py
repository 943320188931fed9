"""The user's contract (``contracts/alexandria-contract.json``), read once from package data.

Everything that needs the contract — the content schema, the scopes, the served read contract,
the demo's worked example — reads it through this module, so an installed wheel and a source
checkout read the very same bytes (``pkgutil.get_data``: the package's own loader, a plain file
read, where ``importlib.resources`` would cost every CLI command a few milliseconds;
``pyproject.toml`` ships the ``contracts/`` folder as the package ``alexandria.contracts``).
"""

from __future__ import annotations

import json
import pkgutil
from functools import cache
from typing import Any

CONTRACT_FILE = "alexandria-contract.json"


def contract_bytes() -> bytes:
    """The contract file's bytes, as the user gave them."""
    data = pkgutil.get_data("alexandria.contracts", CONTRACT_FILE)
    if data is None:  # pragma: no cover (a loader that cannot read data: never the wheel's)
        raise FileNotFoundError(f"alexandria.contracts/{CONTRACT_FILE}")
    return data


@cache
def contract() -> dict[str, Any]:
    """The whole contract (the agent read contract), parsed once.  Callers must not mutate it:
    copy what they change (``api/served_contract.py`` does)."""
    data: dict[str, Any] = json.loads(contract_bytes())
    return data


def write_contract() -> dict[str, Any]:
    """The contract's ``write_contract`` section: content schema, scopes and state rules."""
    section: dict[str, Any] = contract()["write_contract"]
    return section
