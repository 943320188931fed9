"""Line diffs whose cost is bounded by construction, and a bounded cache of them.

The pages show, for each revision of an object, what changed from the revision before.  Whatever
the authors wrote, one diff costs a bounded time and yields a bounded page:

- each side is compared on at most ``MAX_DIFF_LINES`` lines, each cut to
  ``MAX_DIFF_LINE_CHARACTERS`` (the caller's texts may be longer: the diff says it cut);
- lines are numbered by their text (one dictionary lookup each), and the longest common
  subsequence of the two lists of numbers is found by ``rapidfuzz``'s bit-parallel LCS: its time
  is proportional to ``len(a) * len(b) / 64`` machine words whatever the lines hold (about 20 µs
  for two 400-line sides), unlike ``difflib.SequenceMatcher``, whose time on repetitive texts
  grows far faster than the lines (up to a second for two 400-line sides of two alternating
  short lines);
- a diff whose shown lines (changes and their context) would pass ``MAX_SHOWN_LINES`` lines or
  ``MAX_SHOWN_CHARACTERS`` characters is not shown: it is *too different*, and says how many
  lines went and came, and the page links to both revisions whole.

The diff is minimal in lines (an LCS line diff, as ``diff`` and ``git diff`` give): it never
keeps fewer lines in common than ``difflib`` would.  A revision never changes once admitted, so a
diff between two revisions is computed once and kept by their ids (``DiffCache``), within a
bounded number of entries and characters.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rapidfuzz.distance import LCSseq

#: A diff compares at most this many lines of each side; longer texts are cut (and say so).
MAX_DIFF_LINES = 400
#: A diff line shows at most this many characters (a one-line text can be 40,000 long).
MAX_DIFF_LINE_CHARACTERS = 2000
#: Unchanged lines shown around each change.
DIFF_CONTEXT = 3
#: A diff longer than this (changed lines, context and gaps) is too different to show.
MAX_SHOWN_LINES = 200
#: ... and so is one whose shown lines hold more characters than this.
MAX_SHOWN_CHARACTERS = 100_000

CLIPPED = " [… cut]"

#: (tag, i1, i2, j1, j2), as ``difflib``'s opcodes: ``a[i1:i2]`` became ``b[j1:j2]``; tag is
#: ``equal``, ``replace``, ``delete`` or ``insert``.
Opcode = tuple[str, int, int, int, int]


@dataclass(frozen=True)
class DiffLine:
    op: str  # "same", "added", "removed" or "gap" (unchanged lines left out)
    text: str


#: What each line of a run is shown after, as ``diff -u`` shows it.
MARKS = {"same": "  ", "added": "+ ", "removed": "- ", "gap": ""}


@dataclass(frozen=True)
class DiffRun:
    """Consecutive lines of one kind, and the text that shows them: each line after its mark,
    one line each (``pre.diff span`` is a block)."""

    op: str
    lines: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Diff:
    runs: tuple[DiffRun, ...]  # empty when the sides are equal, or too different to show
    truncated: bool  # a side was cut to MAX_DIFF_LINES lines or a line to its characters
    removed: int  # lines of the old side not in the new (among those compared)
    added: int  # lines of the new side not in the old
    too_different: bool  # changes too long to show: the page links to both sides instead

    @property
    def lines(self) -> tuple[DiffLine, ...]:
        return tuple(DiffLine(run.op, line) for run in self.runs for line in run.lines)

    @property
    def changed(self) -> bool:
        return self.removed > 0 or self.added > 0

    @property
    def weight(self) -> int:
        """Roughly what keeping it costs, in characters (``DiffCache``'s measure)."""
        return 64 + sum(2 * len(run.text) + 64 * (len(run.lines) + 1) for run in self.runs)


def clip(lines: Sequence[str]) -> tuple[list[str], bool]:
    """The first ``MAX_DIFF_LINES`` lines, each cut to ``MAX_DIFF_LINE_CHARACTERS`` and marked
    (two lines that differ only after the cut compare equal), and whether anything was cut."""
    n = MAX_DIFF_LINE_CHARACTERS
    cut = len(lines) > MAX_DIFF_LINES
    out = []
    for line in lines[:MAX_DIFF_LINES]:
        if len(line) > n:
            line, cut = line[:n] + CLIPPED, True
        out.append(line)
    return out, cut


def opcodes(a: Sequence[str], b: Sequence[str]) -> list[Opcode]:
    """A minimal line edit script from ``a`` to ``b``: runs of equal lines and, between them,
    one ``replace``, ``delete`` or ``insert`` each.  Bounded by the sizes alone (module doc)."""
    numbers: dict[str, int] = {}
    na = [numbers.setdefault(line, len(numbers)) for line in a]
    nb = [numbers.setdefault(line, len(numbers)) for line in b]
    out: list[Opcode] = []
    for op in LCSseq.opcodes(na, nb):
        tag, i1, i2, j1, j2 = op.tag, op.src_start, op.src_end, op.dest_start, op.dest_end
        if tag != "equal" and out and out[-1][0] != "equal":  # one change between equal runs
            _, i1, _, j1, _ = out.pop()
            tag = "replace" if i1 < i2 and j1 < j2 else "delete" if i1 < i2 else "insert"
        out.append((tag, i1, i2, j1, j2))
    return out


def grouped(codes: Sequence[Opcode], n: int = DIFF_CONTEXT) -> Iterator[list[Opcode]]:
    """The changes in groups with up to ``n`` lines of context, as
    ``difflib.SequenceMatcher.get_grouped_opcodes`` groups its own opcodes."""
    codes = list(codes) or [("equal", 0, 1, 0, 1)]
    tag, i1, i2, j1, j2 = codes[0]
    if tag == "equal":
        codes[0] = tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2
    tag, i1, i2, j1, j2 = codes[-1]
    if tag == "equal":
        codes[-1] = tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:  # a long unchanged run ends a group
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def line_diff(old: Sequence[str], new: Sequence[str], context: int = DIFF_CONTEXT) -> Diff:
    """The diff from ``old`` to ``new`` (lines of text) with ``context`` unchanged lines around
    each change; bounded in time and size whatever the lines hold (module doc)."""
    a, cut_a = clip(old)
    b, cut_b = clip(new)
    codes = opcodes(a, b)
    removed = sum(i2 - i1 for tag, i1, i2, _, _ in codes if tag != "equal")
    added = sum(j2 - j1 for tag, _, _, j1, j2 in codes if tag != "equal")
    groups = list(grouped(codes, context))
    spans: list[tuple[str, Sequence[str]]] = []
    for group in groups:
        if spans or group[0][1] > 0:
            spans.append(("gap", ("…",)))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                spans.append(("same", a[i1:i2]))
            else:
                spans.append(("removed", a[i1:i2]))
                spans.append(("added", b[j1:j2]))
    shown = sum(len(lines) for _, lines in spans)
    size = sum(len(line) for _, lines in spans for line in lines)
    too_different = shown > MAX_SHOWN_LINES or size > MAX_SHOWN_CHARACTERS
    runs = () if too_different else tuple(
        DiffRun(op, tuple(lines), "\n".join(MARKS[op] + line for line in lines))
        for op, lines in spans if lines
    )
    return Diff(runs, cut_a or cut_b, removed, added, too_different)


class DiffCache:
    """Diffs by the pair of revision ids they compare, least recently used first out, within
    ``max_entries`` and ``max_weight`` (``Diff.weight``, about characters).  Thread-safe: pages
    are rendered on worker threads."""

    def __init__(self, max_entries: int = 4096, max_weight: int = 8_000_000) -> None:
        self.max_entries = max_entries
        self.max_weight = max_weight
        self.weight = 0
        self._entries: OrderedDict[tuple[str, str], Diff] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[str, str]) -> Diff | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: tuple[str, str], value: Diff) -> None:
        if value.weight > self.max_weight:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.weight -= old.weight
            self._entries[key] = value
            self.weight += value.weight
            while len(self._entries) > self.max_entries or self.weight > self.max_weight:
                _, dropped = self._entries.popitem(last=False)
                self.weight -= dropped.weight
