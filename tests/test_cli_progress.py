"""The progress of long CLI work (``cli/progress.py``): a tqdm bar with rate and time left on a
terminal, plain lines elsewhere, nothing when silenced."""

from __future__ import annotations

import io
import re

import pytest

from alexandria.cli import progress
from alexandria.cli.progress import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_bar_with_the_rate_and_the_time_left() -> None:
    out = Terminal()
    with ProgressBar("verifying", "entries", 100, out=out) as bar:
        assert bar.mode == "bar"
        for done in range(0, 101, 10):
            bar.update(done)
    text = out.getvalue()
    assert "verifying: 100%" in text and "100/100" in text
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d, [\d.]+k? entries/s\]", text), text
    out = Terminal()
    with ProgressBar("verifying", "entries", 100_000, out=out) as bar:
        bar.update(45_000)
    assert "45.0k/100k" in out.getvalue()


def test_a_total_learnt_on_the_way_and_work_done_before() -> None:
    """A catch-up resuming at 40 of 100: the bar starts there; the total may grow."""
    out = Terminal()
    with ProgressBar("catching up", "entries", initial=40, out=out) as bar:
        bar.update(50, 100)
        bar.update(120, 120)
    assert "120/120" in out.getvalue()


def test_elsewhere_plain_lines_with_the_same_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    out = io.StringIO()  # not a terminal: a log file, a pipe
    bar = ProgressBar("exporting", "entries", 1000, out=out)
    assert bar.mode == "lines"
    bar.update(250)
    bar.update(500)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert re.fullmatch(r"exporting: 250 of 1,000 entries \(25%\), [\d,]+/s, about \d+s left",
                        lines[0]), lines
    assert lines[1].startswith("exporting: 500 of 1,000 entries (50%)")
    assert re.fullmatch(r"exporting: 500 of 1,000 entries \(50%\), [\d,]+/s, done", lines[-1])


def test_a_short_job_elsewhere_says_nothing_and_silenced_nothing_at_all() -> None:
    out = io.StringIO()
    with ProgressBar("migrating", "rows", 10, out=out) as bar:
        bar.update(10)  # well within the first interval
    with ProgressBar("migrating", "rows", 10, bar=False, out=Terminal()) as bar:
        bar.update(5)
        assert bar.mode == "off"
    assert out.getvalue() == ""


def test_lines_written_while_a_bar_is_shown_take_it_off_the_terminal_first() -> None:
    out = Terminal()
    with ProgressBar("publishing", "contributions", 4, out=out) as bar:
        bar.update(2)
        with bar.paused():
            out.write("ID\n")
        bar.update(4)
    before, after = out.getvalue().split("ID\n")
    assert re.search(r"\r +\r$", before)  # the bar's line blanked before the line is written
    assert "/4 [" in after and "4/4" in after  # redrawn below it, then finished
