"""The README's blocks, as the tests that run them read them."""

from __future__ import annotations

import re

from tests.support.library import ROOT

README = ROOT / "README.md"


def tour_script() -> str:
    """The tour's shell block, exactly as the README shows it."""
    text = README.read_text()
    section = text[text.index("## A tour with the CLI"):text.index("## Serving a library")]
    found = re.search(r"```sh\n(.*?)```", section, re.S)
    assert found, "the tour has a ```sh block"
    return found.group(1)
