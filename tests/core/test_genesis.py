from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from alexandria.core.trust import Genesis
from alexandria.errors import NotPermitted
from alexandria.service.library import load_genesis

GENESIS_DIR = Path(__file__).resolve().parents[2] / "genesis"
DEV_PIN = "6b86d5e4d47aa71a681cbe316bc853285fa9f7be8bbca3028f747c6754ff61f4"


def test_dev_genesis_is_what_the_script_generates() -> None:
    script = GENESIS_DIR / "make_dev_genesis.py"
    assert subprocess.run([sys.executable, str(script), "--check"]).returncode == 0


def test_dev_genesis_pin_and_threshold() -> None:
    genesis = load_genesis(GENESIS_DIR / "dev-genesis.json")
    assert genesis.pin == DEV_PIN
    assert genesis.threshold == 2 and len(genesis.root_keys) == 3
    assert DEV_PIN in (GENESIS_DIR / "README.md").read_text()


def test_genesis_needs_threshold_signatures() -> None:
    doc = json.loads((GENESIS_DIR / "dev-genesis.json").read_text())
    one = copy.deepcopy(doc)
    one["signatures"] = one["signatures"][:1]
    with pytest.raises(NotPermitted) as info:
        Genesis.from_document(one)
    assert info.value.code == "GENESIS_SIGNATURES"
    assert "1/2" in info.value.message
    two = copy.deepcopy(doc)
    two["signatures"] = two["signatures"][1:]
    assert Genesis.from_document(two).pin == DEV_PIN


def test_genesis_pin_mismatch_and_tampering() -> None:
    doc = json.loads((GENESIS_DIR / "dev-genesis.json").read_text())
    with pytest.raises(NotPermitted) as info:
        Genesis.from_document(doc, pin="0" * 64)
    assert info.value.code == "GENESIS_PIN_MISMATCH"
    tampered = copy.deepcopy(doc)
    tampered["genesis"]["library"] = "someone-else"
    with pytest.raises(NotPermitted):
        Genesis.from_document(tampered)
    extra = copy.deepcopy(doc)
    extra["genesis"]["extra"] = 1
    with pytest.raises(NotPermitted) as info:
        Genesis.from_document(extra)
    assert info.value.code == "CERTIFICATE_FIELDS"
