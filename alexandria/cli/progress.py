"""Progress of long work (``verify``, ``export``, ``restore --catch-up``, ``migrate``,
``publish --jsonl``) on stderr.

On a terminal: a tqdm bar, redrawn in place, with what is done of the total, the rate and the
time left (``verifying:  45%|████      | 45.0k/100k [00:11<00:14, 3.81k entries/s]``).
Elsewhere (a log file, a pipe, a service's journal): a plain line at most every
``PLAIN_INTERVAL_S`` seconds, with the same figures in words, and one when the work ends if any
was written — a short job writes none.  ``--progress`` forces the bar, ``--no-progress``
silences both.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import IO, Never

from tqdm import tqdm

#: a plain line at most this often when stderr is not a terminal
PLAIN_INTERVAL_S = 10.0


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes \
        else f"{secs}s"


class ProgressBar:
    """``update(done, total)`` as the work goes on; ``close()`` at its end (or use it as a
    context manager).  ``bar``: True for the bar, False for nothing, None (the default) for the
    bar on a terminal and plain lines elsewhere.  ``initial``: what was done before this run
    (a catch-up resuming at entry 40,000): counted in ``done``, not in the rate."""

    def __init__(self, what: str, unit: str, total: int | None = None, *,
                 bar: bool | None = None, initial: int = 0, out: IO[str] | None = None) -> None:
        self.what = what
        self.unit = unit
        self.total = total
        self.initial = self.done = initial
        self.out = out or sys.stderr
        self.mode = "bar" if bar or (bar is None and self.out.isatty()) else \
            "lines" if bar is None else "off"
        self.started = self.said = time.monotonic()
        self.lines = 0
        self._bar: tqdm[Never] | None = None
        if self.mode == "bar":
            # 45.0k/100k for large counts; 2/4, not 2.00/4.00, for small ones
            self._bar = tqdm(total=total, initial=initial, desc=what, unit=f" {unit}",
                             unit_scale=total is None or total >= 10_000, file=self.out,
                             dynamic_ncols=True, mininterval=0.2, smoothing=0.1)

    def __call__(self, done: int, total: int | None = None) -> None:
        """``update``: the shape of ``audit.verify``'s progress callback."""
        self.update(done, total)

    def update(self, done: int, total: int | None = None) -> None:
        changed = total is not None and total != self.total
        if changed:
            self.total = total
        step, self.done = done - self.done, done
        if self._bar is not None:
            if changed:
                self._bar.total = total
            if step:
                self._bar.update(step)
            elif changed:
                self._bar.refresh()
        elif self.mode == "lines":
            now = time.monotonic()
            if now - self.said >= PLAIN_INTERVAL_S:
                self.said = now
                self._say(self.line())

    def line(self) -> str:
        """The figures in words: ``verifying: 45,000 of 100,000 entries (45%), 3,812/s,
        about 14s left``."""
        elapsed = time.monotonic() - self.started
        rate = (self.done - self.initial) / elapsed if elapsed > 0 else 0.0
        text = f"{self.what}: {self.done:,}"
        if self.total:
            text += f" of {self.total:,} {self.unit} ({100 * self.done // self.total}%)"
        else:
            text += f" {self.unit}"
        text += f", {rate:,.0f}/s"
        if self.total and rate > 0 and self.done < self.total:
            text += f", about {_duration((self.total - self.done) / rate)} left"
        return text

    def _say(self, text: str) -> None:
        self.lines += 1
        self.out.write(text + "\n")
        self.out.flush()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The bar taken off the terminal while other lines are written, then redrawn."""
        if self._bar is None:
            yield
            return
        self._bar.clear()
        try:
            yield
        finally:
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.mode == "lines" and self.lines:
            self._say(self.line().split(", about", 1)[0] + ", done")
            self.lines = 0

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
