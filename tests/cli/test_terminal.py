"""What the CLI prints: ``lines_together`` holds stdout lines for one write, and a note on
stderr writes those held first, so the two streams keep their order."""

from __future__ import annotations

import pytest

from alexandria.cli.terminal import emit_json, lines_together, note, say


def test_lines_said_together_are_written_at_the_end_or_before_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with lines_together():
        say("first")
        emit_json({"id": "second"})
        assert capsys.readouterr().out == ""
        note("a refusal")
        assert capsys.readouterr() == ('first\n{"id":"second"}\n', "a refusal\n")
        say("third\nline")
        assert capsys.readouterr().out == ""
    assert capsys.readouterr().out == "third\\x0aline\n"  # made visible, as ever
    say("alone")
    assert capsys.readouterr().out == "alone\n"
