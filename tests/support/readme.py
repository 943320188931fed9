"""The README's blocks, as the tests that run them read them, and its tour run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.library import ROOT
from tests.support.liveserver import free_port, stop_group

README = ROOT / "README.md"


def tour_script() -> str:
    """The tour's shell block, exactly as the README shows it."""
    text = README.read_text()
    section = text[text.index("## A tour with the CLI"):text.index("## Serving a library")]
    found = re.search(r"```sh\n(.*?)```", section, re.S)
    assert found, "the tour has a ```sh block"
    return found.group(1)


@contextmanager
def tour_after_demo(tmp_path: Path, link_venv: bool = False
                    ) -> Iterator[tuple[int, subprocess.CompletedProcess[str]]]:
    """`alexandria demo` (what `make run` starts) in ``tmp_path``, then the tour pasted into
    bash in the same directory, with `set -euo pipefail`: every command must succeed as
    written.  Yields the demo's port and the tour's run; stops the demo after.  ``link_venv``:
    ``tmp_path/.venv`` is this checkout's, as the README's paths expect."""
    port = free_port()
    binaries = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALEXANDRIA_")}
    env.update(PORT=str(port), HOME=str(tmp_path / "home"),  # nothing reaches a real config
               PATH=f"{binaries}{os.pathsep}{env.get('PATH', '')}")
    env.pop("XDG_CONFIG_HOME", None)
    if link_venv:
        (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    demo = subprocess.Popen([str(binaries / "alexandria"), "demo", "--port", str(port)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            if line.startswith("Ctrl-C stops the server"):
                break
        else:
            pytest.fail(f"the demo exited ({demo.wait()}) before serving")
        tour = subprocess.run(["bash", "-euo", "pipefail", "-c", tour_script()], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=900)
        assert tour.returncode == 0, tour.stderr[-3000:]
        yield port, tour
    finally:
        stop_group(demo)
