"""The work one page costs is bounded whatever its objects hold: the diffs of an object's history
(``api/web/diffs.py``) against ``difflib`` and at their cut-offs, the cache of diffs, history
paging, and, against a live server, an object whose revisions are the worst case for
``difflib`` (hundreds of lines of two alternating short lines) served while the rest of the
library goes on answering."""

from __future__ import annotations

import asyncio
import difflib
import re
import threading
import time
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alexandria.api.status import status_of
from alexandria.api.web import diffs, present
from alexandria.api.web.diffs import (
    DIFF_CONTEXT,
    MAX_DIFF_LINES,
    MAX_SHOWN_LINES,
    Diff,
    DiffCache,
    grouped,
    line_diff,
    opcodes,
)
from alexandria.api.web.gate import RETRY_AFTER_S, PageGate
from alexandria.core.timestamps import format_ms, now_ms
from alexandria.errors import Failed
from alexandria.reads.pages import HISTORY_PAGE_SIZE
from alexandria.service.bootstrap import Founding
from tests.support.library import Api
from tests.support.liveserver import NewDb, Server, serving, write_library_files

# --- the bounded diff against difflib -----------------------------------------------------------

small_lines = st.lists(st.sampled_from(["a", "b", "c", "", "  d", "é"]), max_size=24)


def _sides(d: Diff) -> tuple[list[str], list[str]]:
    old = [line.text for line in d.lines if line.op in ("same", "removed")]
    new = [line.text for line in d.lines if line.op in ("same", "added")]
    return old, new


@settings(max_examples=400, deadline=None)
@given(small_lines, small_lines)
def test_a_whole_diff_rebuilds_both_sides_and_keeps_at_least_what_difflib_keeps(
    a: list[str], b: list[str]
) -> None:
    d = line_diff(a, b, context=10_000)  # every unchanged line shown: no gap
    assert not d.truncated and not d.too_different
    assert "gap" not in {line.op for line in d.lines}
    if a == b:
        assert d.lines == () and not d.changed
        return
    assert _sides(d) == (a, b)
    kept = sum(1 for line in d.lines if line.op == "same")
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    assert kept >= sum(block.size for block in matcher.get_matching_blocks())
    assert d.removed == len(a) - kept and d.added == len(b) - kept


@settings(max_examples=400, deadline=None)
@given(small_lines, small_lines, st.integers(0, 4))
def test_groups_are_difflibs_groups_of_the_same_opcodes(
    a: list[str], b: list[str], n: int
) -> None:
    codes = opcodes(a, b)

    class Same(difflib.SequenceMatcher[str]):
        def get_opcodes(self) -> list[tuple[str, int, int, int, int]]:
            return list(codes)

    assert list(grouped(codes, n)) == list(Same(None, a, b).get_grouped_opcodes(n))
    # one change between runs of equal lines, and the runs cover both sides in order
    assert all(x[0] == "equal" or y[0] == "equal" for x, y in pairwise(codes))
    assert [c[1] for c in codes[1:]] == [c[2] for c in codes[:-1]]
    assert [c[3] for c in codes[1:]] == [c[4] for c in codes[:-1]]


@pytest.mark.parametrize(("a", "b"), [
    ("abcdefghij", "abcXefghij"),  # one line replaced in the middle
    ("abcdefghijklmnop", "abXdefghijklmnoY"),  # two changes, far apart: two groups
    ("abc", "abcd"),  # an insertion at the end
    ("abcdefghijk", "bcdefghijk"),  # a deletion at the start
])
def test_single_edits_show_as_difflib_shows_them(a: str, b: str) -> None:
    d = line_diff(list(a), list(b))
    matcher = difflib.SequenceMatcher(None, list(a), list(b), autojunk=False)
    expected: list[tuple[str, str]] = []
    for group in matcher.get_grouped_opcodes(DIFF_CONTEXT):
        if expected or group[0][1] > 0:
            expected.append(("gap", "…"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                expected += [("same", x) for x in a[i1:i2]]
            else:
                expected += [("removed", x) for x in a[i1:i2]] + [("added", x) for x in b[j1:j2]]
    assert [(line.op, line.text) for line in d.lines] == expected


def alternating(first: str, second: str, lines: int = MAX_DIFF_LINES) -> list[str]:
    return [first if i % 2 == 0 else second for i in range(lines)]


def test_the_worst_case_for_difflib_is_too_different_to_show() -> None:
    """Two 400-line sides of two alternating short lines (about a second of ``difflib``): every
    other line changed, so the diff would be 600 lines long; it says so, with its counts."""
    d = line_diff(alternating("a", "b"), alternating("a", "c"))
    assert d.too_different and d.lines == () and not d.truncated
    assert (d.removed, d.added) == (MAX_DIFF_LINES // 2, MAX_DIFF_LINES // 2)
    assert d.changed


def test_a_diff_is_shown_up_to_its_bound_and_no_further() -> None:
    base = [f"line {i}" for i in range(MAX_DIFF_LINES)]
    # k lines changed, each far from the others: 1 + 2 * context + 2 lines shown for each
    per_change = 2 + 2 * DIFF_CONTEXT + 1  # its removed and added lines, context, a gap
    fits = MAX_SHOWN_LINES // per_change

    def changed(k: int) -> list[str]:
        out = list(base)
        for i in range(k):
            out[10 + i * 12] += " changed"
        return out

    shown = line_diff(base, changed(fits))
    assert not shown.too_different and len(shown.lines) <= MAX_SHOWN_LINES
    assert shown.removed == shown.added == fits
    over = line_diff(base, changed(fits + 1))
    assert over.too_different and over.lines == ()
    wide = line_diff(["x" * 1999] * 60, ["y" * 1999] * 60)  # 120 lines, 240,000 characters
    assert wide.too_different


def test_long_sides_and_lines_are_cut() -> None:
    long_a = [f"line {i}" for i in range(5000)]
    d = line_diff(long_a, [*long_a[:10], "new", *long_a[10:]])
    assert d.truncated and (d.removed, d.added) == (1, 1)  # the line pushed past 400 left
    wide = line_diff(["a" * 40_000], ["b" * 40_000])
    assert wide.truncated and max(len(line.text) for line in wide.lines) < 2100
    same_start = line_diff(["a" * 3000 + "x"], ["a" * 3000 + "y"])
    assert same_start.truncated and not same_start.changed  # equal up to the cut


# --- the cache --------------------------------------------------------------------------------


def test_the_cache_keeps_the_most_recent_within_its_entries_and_weight() -> None:
    small = line_diff(["a"], ["b"])
    cache = DiffCache(max_entries=3, max_weight=10 * small.weight)
    for i in range(5):
        cache.put((f"{i}", "x"), small)
    assert len(cache) == 3 and cache.get(("0", "x")) is None
    assert cache.get(("2", "x")) is small  # now the most recent: 3 goes first
    cache.put(("5", "x"), small)
    assert cache.get(("3", "x")) is None and cache.get(("2", "x")) is small
    big = line_diff([f"{i}" for i in range(30)], [f"{i}!" for i in range(30)])
    heavy = DiffCache(max_entries=100, max_weight=2 * big.weight)
    for i in range(4):
        heavy.put((f"{i}", "x"), big)
    assert len(heavy) == 2 and heavy.weight <= heavy.max_weight
    heavy.put(("huge", "x"), Diff(big.runs * 3, False, 1, 1, False))  # never kept
    assert heavy.get(("huge", "x")) is None and len(heavy) == 2


def _doc(rid: str, text: str) -> present.Revision:
    return present.Revision(rid, rid, "document", "T", "a" * 64, "t", {"text": text}, (), "", 1,
                            "t", {})


def test_a_diff_of_two_revisions_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = present.line_diff

    def counted(a: list[str], b: list[str]) -> Diff:
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(present, "line_diff", counted)
    monkeypatch.setattr(present, "DIFFS", DiffCache())
    old, new = _doc("1" * 64, "one"), _doc("2" * 64, "two")
    first = present.diff(old, new)
    assert present.diff(old, new) is first and len(calls) == 1
    assert present.diff(new, old) is not first and len(calls) == 2
    # what is not a revision id (no stored revision) is never cached
    present.diff(_doc("x", "one"), _doc("y", "two"))
    present.diff(_doc("x", "one"), _doc("y", "three"))
    assert len(calls) == 4 and len(present.DIFFS) == 2


# --- against a live server ----------------------------------------------------------------------

#: Revisions of the live test's object, all on the old page (which showed 50 per page).
REVISIONS = 24
#: How long ``/api/genesis`` and each page may take while pages of the object are asked for.
#: Each diff of the object took about a second with ``difflib`` on the event loop: a page took
#: 17-21 s and ``/api/genesis`` waited 15 s behind it.  Bounded, a page costs milliseconds: the
#: bounds are wide for a loaded machine and still far below what the unbounded diff took.
GENESIS_WAIT_S = 3.0
PAGE_WAIT_S = 10.0


@pytest.fixture
def worst_object(tmp_path: Path, founding: Founding, new_db: NewDb
                 ) -> Iterator[tuple[Server, str, list[str]]]:
    """A live server (of each backend) holding a discussion of ``REVISIONS`` revisions, each
    400 lines of two alternating short lines, every other line changed from the one before."""
    genesis, log_key = write_library_files(founding, tmp_path)
    with serving(genesis, new_db(tmp_path / "lib.db"), log_key) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        for doc in founding.authority_documents():
            assert client.post("/api/authority", json=doc).status_code == 201
        owner = founding.participants["owner"]
        start = now_ms() - 60_000
        ids: list[str] = []
        for i in range(REVISIONS):
            content: dict[str, Any] = {
                "kind": "discussion", "title": "Alternating lines",
                "body": {"text": "\n".join(alternating("a" if i % 2 else "c", "b"))},
                "links": [], "previous": ids[-1] if ids else "",
            }
            env = owner.envelope(founding.genesis, content, format_ms(start + i))
            r = client.post("/api/entries", content=orjson.dumps(env))
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        yield server, ids[0], ids


@pytest.mark.slow
def test_the_worst_object_page_answers_and_the_library_keeps_answering(
    worst_object: tuple[Server, str, list[str]],
) -> None:
    server, root, ids = worst_object
    paths = [f"/objects/{root}"] + [
        f"/objects/{root}?section=history&offset={o}"
        for o in range(HISTORY_PAGE_SIZE, REVISIONS, HISTORY_PAGE_SIZE)
    ]
    pages: dict[str, tuple[float, httpx.Response]] = {}
    failures: list[BaseException] = []

    def load(path: str) -> None:
        try:
            with httpx.Client(base_url=server.url, timeout=120) as c:
                t0 = time.monotonic()
                r = c.get(path)
                pages[path] = (time.monotonic() - t0, r)
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)

    loaders = [threading.Thread(target=load, args=(p,)) for p in paths * 2]
    waits: list[float] = []
    with httpx.Client(base_url=server.url, timeout=120) as client:
        assert client.get("/api/genesis").status_code == 200  # the connection is open
        for t in loaders:
            t.start()
        while any(t.is_alive() for t in loaders):
            t0 = time.monotonic()
            assert client.get("/api/genesis").status_code == 200
            waits.append(time.monotonic() - t0)
            time.sleep(0.02)
        for t in loaders:
            t.join()
    assert not failures, failures
    assert set(pages) == set(paths)
    assert max(waits) < GENESIS_WAIT_S, f"/api/genesis waited {max(waits):.1f} s"
    for path, (took, r) in pages.items():
        assert r.status_code == 200, r.text[:500]
        assert took < PAGE_WAIT_S, f"{path} took {took:.1f} s"
    # the first page: the newest HISTORY_PAGE_SIZE revisions, newest first, each diff too
    # different to show (every other line changed), with both sides a link away, and the next
    # (older) page linked
    first = pages[paths[0]][1].text
    numbers = [int(n) for n in re.findall(r">Revision (\d+)</a>", first)]
    assert numbers == list(range(REVISIONS, REVISIONS - HISTORY_PAGE_SIZE, -1))
    assert first.count("Too different to show as a diff here: 200 lines removed, 200 added") \
        == HISTORY_PAGE_SIZE
    assert f'href="/revisions/{ids[-2]}">the previous revision</a>' in first
    assert f'href="/revisions/{ids[-1]}">this one</a>' in first
    assert f'href="/objects/{root}?section=history&amp;offset={HISTORY_PAGE_SIZE}"' in first
    # an older page: its oldest revision's diff is from the one before the page; it links back
    second = pages[paths[1]][1].text
    oldest = REVISIONS - 2 * HISTORY_PAGE_SIZE + 1  # the number of its oldest revision
    assert f'href="/revisions/{ids[oldest - 2]}">the previous revision</a>' in second
    assert f'href="/revisions/{ids[oldest - 1]}">this one</a>' in second
    assert f'href="/objects/{root}?section=history"' in second and "Newer revisions" in second
    last = pages[paths[-1]][1].text
    assert ">Revision 1</a>" in last and "Older revisions" not in last
    assert diffs.MAX_SHOWN_LINES < 2 * MAX_DIFF_LINES  # what made these too different


# --- pages take turns -----------------------------------------------------------------------


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("never happened")


async def test_pages_take_turns_within_their_share_and_wait_a_bounded_while() -> None:
    gate = PageGate(share=0.5, max_waiting=1, max_wait_s=30)
    release = asyncio.Event()
    times: dict[str, float] = {}

    async def slow() -> str:
        times["slow"] = time.monotonic()
        await asyncio.sleep(0.1)
        await release.wait()
        times["slow done"] = time.monotonic()
        return "slow"

    async def quick() -> str:
        times["quick"] = time.monotonic()
        return "quick"

    first = asyncio.create_task(gate.run(slow))
    await _until(lambda: "slow" in times)
    second = asyncio.create_task(gate.run(quick))
    await _until(lambda: gate.waiting == 1)
    assert gate.waiting == 1 and "quick" not in times  # the turn is taken: it waits
    with pytest.raises(Failed) as busy:  # and no more than one may wait
        await gate.run(quick)
    assert busy.value.code == "PAGES_BUSY" and status_of(busy.value) == 503
    assert busy.value.details == {"retry_after": RETRY_AFTER_S}
    release.set()
    assert await first == "slow" and await second == "quick"
    # the slow page took at least 0.1 s: with a share of one half, the next waited as long
    took = times["slow done"] - times["slow"]
    assert took >= 0.1 and times["quick"] - times["slow done"] >= took * 0.99

    impatient = PageGate(max_wait_s=0.05)
    held = asyncio.Event()
    holder = asyncio.create_task(impatient.run(held.wait))
    await _until(lambda: impatient._turn.locked())
    t0 = time.monotonic()
    with pytest.raises(Failed) as late:
        await impatient.run(quick)
    assert late.value.code == "PAGES_BUSY" and time.monotonic() - t0 >= 0.05
    held.set()
    await holder


async def test_a_busy_page_is_a_typed_503_with_retry_after(api: Api) -> None:
    app: Any = api.client._transport.app  # type: ignore[attr-defined]
    app.state.page_gate = gate = PageGate(max_waiting=0)
    held = asyncio.Event()
    holder = asyncio.create_task(gate.run(held.wait))  # the turn is taken; none may wait
    await _until(gate._turn.locked)
    for path in ("/", "/log", f"/objects/{'0' * 64}"):
        r = await api.client.get(path)
        assert r.status_code == 503 and r.headers["retry-after"] == str(RETRY_AFTER_S)
        assert "PAGES_BUSY" in r.text and r.headers["content-type"].startswith("text/html")
    assert (await api.client.get("/api/genesis")).status_code == 200  # the API is not gated
    held.set()
    await holder
    # with serve --server-timing, a page that waited for its turn says how long, apart from
    # its own time
    app.state.server_timing = True
    app.state.page_gate = gate = PageGate()
    held.clear()
    holder = asyncio.create_task(gate.run(held.wait))
    await _until(gate._turn.locked)
    waiting = asyncio.create_task(api.client.get("/log"))
    await _until(lambda: gate.waiting == 1)
    await asyncio.sleep(0.05)
    held.set()
    await holder
    r = await waiting
    assert r.status_code == 200
    timing = dict(re.findall(r"(\w+);dur=([0-9.]+)", r.headers["server-timing"]))
    assert float(timing["wait"]) >= 50 and "app" in timing
