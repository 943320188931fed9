"""The package stands alone: a wheel built from the repository, installed into a fresh virtual
environment, serves a library from an empty directory (nothing read from the source tree).

The fresh environment gets the wheel only; the wheel's dependencies are lent by the test's own
environment through a path entry (no network, no editable finder: ``.pth`` files of a path
entry are not run, so ``import alexandria`` can only find the wheel's copy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import httpx
import pytest

from tests.support.liveserver import free_port, stop_group

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _tracked_tree(dest: Path) -> None:
    """The repository's files as a clone would have them (tracked, and new files not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the wheel; returns its ``bin`` folder."""
    base = tmp_path_factory.mktemp("wheel")
    tree, wheels, env = base / "tree", base / "wheels", base / "env"
    _tracked_tree(tree)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(tree)],
        check=True, capture_output=True,
    )
    (wheel,) = wheels.glob("alexandria_ledger-*.whl")
    venv.create(env, with_pip=False)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env), "platbase": str(env)}))
    (site / "lent-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--ignore-installed", "--prefix", str(env), str(wheel)],
        check=True, capture_output=True,
    )
    return env / "bin"


def test_the_wheel_carries_every_module_template_and_the_contract(installed: Path) -> None:
    out = subprocess.run(
        [str(installed / "python"), "-c",
         "import alexandria, alexandria.core.contract as c;"
         "print(alexandria.__file__); print(len(c.contract_bytes()))"],
        check=True, capture_output=True, text=True, cwd=installed,
    ).stdout.split()
    assert not out[0].startswith(str(ROOT)), "imported from the source tree, not the wheel"
    assert int(out[1]) == len((ROOT / "contracts" / "alexandria-contract.json").read_bytes())
    site = Path(out[0]).parent
    packaged = {p.relative_to(site).as_posix() for p in site.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}
    tracked = subprocess.run(["git", "ls-files", "alexandria", "contracts"], cwd=ROOT,
                             check=True, capture_output=True, text=True).stdout.split()
    wanted = {name.removeprefix("alexandria/") if name.startswith("alexandria/")
              else "contracts/" + name.removeprefix("contracts/") for name in tracked
              if not name.endswith(".md")}
    assert wanted <= packaged, sorted(wanted - packaged)


def test_serve_from_an_empty_directory(installed: Path, tmp_path: Path) -> None:
    port = free_port()
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.Popen(
        [str(installed / "alexandria"), "serve", "--port", str(port)], cwd=empty,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1].decode()
            try:
                contract = httpx.get(f"http://127.0.0.1:{port}/api/contract", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        assert contract.status_code == 200
        assert contract.json()["format"] == "alexandria.agent-read-contract/1"
        catalogue = httpx.get(f"http://127.0.0.1:{port}/api/catalogue", timeout=5)
        assert catalogue.status_code == 200
        assert "items" in catalogue.json()
        assert (empty / "alexandria-data").is_dir()
    finally:
        stop_group(proc)
