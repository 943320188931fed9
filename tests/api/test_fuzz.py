"""Schemathesis, every check, against a live server's ``/api/openapi.json``: no 5xx
and every response as documented.  Seeded and small enough for ``make test``; ``bench/fuzz.py``
runs the same configuration (``schemathesis.toml``) with about 100,000 cases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from alexandria.service.bootstrap import Founding
from tests.support.liveserver import NewDb, Server, stop_group, write_library_files

ROOT = Path(__file__).resolve().parents[2]


def test_schemathesis_finds_nothing(tmp_path: Path, founding: Founding, new_db: NewDb) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    # the fuzzer is refused hundreds of times from one address: none of it held 2 s
    server = Server(genesis, new_db(tmp_path / "lib.db"), log_key,
                    extra=("--refusal-burst", "1000000"))
    try:
        for doc in founding.authority_documents():  # a library with something to read
            httpx.post(f"{server.url}/api/authority", json=doc).raise_for_status()
        st = subprocess.run(
            [str(Path(sys.executable).with_name("st")), "--config-file",
             str(ROOT / "schemathesis.toml"), "run", f"{server.url}/api/openapi.json",
             "--checks", "all", "--max-examples", "10", "--seed", "21", "--workers", "1",
             "--suppress-health-check", "all", "--no-color"],
            capture_output=True, text=True, timeout=600, check=False,
            env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_hooks"}, cwd=ROOT,
        )
    finally:
        _out, err_bytes = stop_group(server.proc)
        err = err_bytes.decode(errors="replace")
        server.proc.stderr.close()
    assert st.returncode == 0, st.stdout[-6000:]
    assert " passed" in st.stdout
    assert "Traceback" not in err, err[-3000:]
