"""``GET /api/changes`` (PROTOCOL §5) through the real HTTP app: membership, snapshots, page
bounds, cursor integrity (400) and cursors that cannot be honoured (409 resync_required)."""

from __future__ import annotations

import asyncio
import base64
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alexandria.core.canonical import canonical
from alexandria.reads import changes
from alexandria.reads.changes import Cursor, Limits
from alexandria.store import backup
from alexandria.store.backends import storage_for
from tests.support.library import CONTRACT, Api
from tests.support.objects import publish_example

# --- helpers ---------------------------------------------------------------------------------


async def get(api: Api, root: str, cursor: str | None = None, limit: int | None = None,
              expect: int = 200) -> dict[str, Any]:
    params = {"root": root}
    if cursor is not None:
        params["cursor"] = cursor
    if limit is not None:
        params["limit"] = str(limit)
    r = await api.client.get("/api/changes", params=params)
    assert r.status_code == expect, r.text
    out: dict[str, Any] = r.json()
    return out


async def follow(api: Api, root: str, cursor: str | None = None, limit: int | None = None,
                 ) -> tuple[list[dict[str, Any]], str, int, int]:
    """Page until has_more is false: (items, cursor, last snapshot, number of calls)."""
    items: list[dict[str, Any]] = []
    calls = 0
    while True:
        page = await get(api, root, cursor, limit)
        calls += 1
        items += page["items"]
        cursor = page["cursor"]
        if not page["has_more"]:
            assert cursor is not None
            return items, cursor, page["snapshot"], calls


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [it["id"] for it in items]


def seqs(items: list[dict[str, Any]]) -> list[int]:
    return [it["admission"]["sequence"] for it in items]


async def space(api: Api, title: str = "space", parent: str | None = None) -> str:
    links = [] if parent is None else [{"relation": "contained_in", "target": parent}]
    signed = await api.publish("owner", {"kind": "space", "title": title,
                                         "body": {"summary": title}, "links": links,
                                         "previous": ""})
    return str(signed["id"])


async def reply(api: Api, to: str, text: str = "r", who: str = "peer") -> str:
    signed = await api.publish(who, {"kind": "reply", "title": "reply", "body": text,
                                     "links": [{"relation": "replies_to", "target": to}],
                                     "previous": ""})
    return str(signed["id"])


async def discussion(api: Api, parent: str | None = None) -> str:
    links = [] if parent is None else [{"relation": "contained_in", "target": parent}]
    signed = await api.publish("peer", {"kind": "discussion", "title": "d",
                                        "body": {"text": "d"}, "links": links, "previous": ""})
    return str(signed["id"])


# --- membership ------------------------------------------------------------------------------


async def test_worked_example_members_of_the_space_and_of_the_claim(api: Api) -> None:
    n = await publish_example(api)
    vote = (await api.publish("peer", {"kind": "vote", "title": "v", "body": "1",
                                       "links": [{"relation": "votes_on", "target": n["space"]}],
                                       "previous": ""}))["id"]
    cite = (await api.publish("peer", {"kind": "claim", "title": "elsewhere",
                                       "body": {"statement": "s", "scope": "s",
                                                "assumptions": []},
                                       "links": [{"relation": "cites", "target": n["reply"]}],
                                       "previous": ""}))["id"]
    including = (await api.publish("owner", {"kind": "space", "title": "shelf",
                                             "body": {"summary": "s"},
                                             "links": [{"relation": "includes",
                                                        "target": n["claim"]}],
                                             "previous": ""}))["id"]
    # deeper: a reply to the reply (to the discussion in the subspace) and one to that
    r2 = await reply(api, n["reply"])
    r3 = await reply(api, r2, who="owner")

    items, _c, snapshot, _n = await follow(api, n["space"])
    assert snapshot == await api.library.storage.log_size()
    every = [s["name"] for s in CONTRACT["object_examples"]["steps"]]
    expected = [n[x] for x in every if x != "relationship"] + [r2, r3]
    assert ids(items) == expected  # admission order; relationship, vote, citation excluded
    assert seqs(items) == sorted(seqs(items))

    items, _c, _s, _n = await follow(api, n["claim"])
    assert ids(items) == [n[x] for x in ("claim", "discussion", "reply", "branch", "evidence",
                                         "assessment", "proposal", "merge")] + [r2, r3]
    items, _c, _s, _n = await follow(api, n["subspace"])
    assert n["document"] not in ids(items) and n["space"] not in ids(items)
    assert r3 in ids(items)
    items, _c, _s, _n = await follow(api, n["branch"])
    assert ids(items) == [n["branch"]]  # branches_from makes the branch a member of the reply
    items, _c, _s, _n = await follow(api, n["reply"])
    assert ids(items) == [n["reply"], n["branch"], r2, r3]
    items, _c, _s, _n = await follow(api, including)
    assert ids(items) == [including]  # includes is not a feed relation
    items, _c, _s, _n = await follow(api, vote)
    assert ids(items) == [vote]
    items, _c, _s, _n = await follow(api, cite)
    assert ids(items) == [cite]


async def test_items_are_the_stored_signed_records(api: Api) -> None:
    root = await space(api)
    first = (await api.client.get(f"/api/entries/{root}")).content
    page = await get(api, root)
    assert canonical(page["items"][0]) == first
    r = await api.client.get("/api/changes", params={"root": root})
    assert r.headers["content-type"] == "application/json"
    assert first in r.content  # spliced as stored, not re-rendered


# --- snapshots -------------------------------------------------------------------------------


async def test_has_more_continues_the_snapshot_and_false_begins_a_newer_one(api: Api) -> None:
    top = await space(api)
    d = await discussion(api, top)
    before = [top, d] + [await reply(api, d, f"r{i}") for i in range(5)]

    page = await get(api, top, limit=3)
    hi = page["snapshot"]
    assert hi == await api.library.storage.log_size()
    assert ids(page["items"]) == before[:3] and page["has_more"] is True
    during = [await reply(api, d, f"late{i}") for i in range(3)]
    await space(api, "not a member")
    seen = list(page["items"])
    while page["has_more"]:
        page = await get(api, top, page["cursor"], limit=3)
        assert page["snapshot"] == hi  # the same snapshot while has_more
        assert all(s <= hi for s in seqs(page["items"]))
        seen += page["items"]
    assert ids(seen) == before
    # has_more false: the next call fixes a new hi and returns exactly what was admitted since
    page = await get(api, top, page["cursor"])
    assert page["snapshot"] == await api.library.storage.log_size() > hi
    assert ids(page["items"]) == during and page["has_more"] is False
    # caught up: an empty page that still names its snapshot and keeps the position
    again = await get(api, top, page["cursor"])
    assert again["items"] == [] and again["has_more"] is False
    assert again["snapshot"] == page["snapshot"]
    last = await reply(api, d, "after")
    page = await get(api, top, again["cursor"])
    assert ids(page["items"]) == [last]


async def test_has_more_is_false_as_soon_as_the_snapshot_is_exhausted(api: Api) -> None:
    top = await space(api)
    for i in range(4):
        await reply(api, await discussion(api, top), f"x{i}")
    page = await get(api, top, limit=9)  # exactly the 9 members
    assert len(page["items"]) == 9 and page["has_more"] is False
    page = await get(api, top, limit=8)
    assert len(page["items"]) == 8 and page["has_more"] is True


async def test_limit_default_and_bounds(api: Api) -> None:
    top = await space(api)
    d = await discussion(api, top)
    await asyncio.gather(*(reply(api, d, f"r{i}") for i in range(55)))
    page = await get(api, top)
    assert len(page["items"]) == 50 and page["has_more"] is True
    page = await get(api, top, page["cursor"], limit=50)
    assert len(page["items"]) == 7 and page["has_more"] is False
    for bad in ("0", "51", "-1", "x", "1.5", "01", ""):
        r = await api.client.get("/api/changes", params={"root": top, "limit": bad})
        assert r.status_code == 400, bad
        assert r.json()["code"] == "BAD_PARAMETER"


async def test_followers_paging_during_concurrent_admissions_see_everything_once(
    api: Api,
) -> None:
    top = await space(api)
    d = await discussion(api, top)

    done = asyncio.Event()

    async def writer() -> list[str]:
        out = []
        for i in range(8):
            out += await asyncio.gather(*(reply(api, d, f"c{i}.{j}") for j in range(4)))
            await space(api, f"noise {i}")
        done.set()
        return out

    async def reader() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor = None
        while not done.is_set():
            page = await get(api, top, cursor, limit=2)
            assert all(s <= page["snapshot"] for s in seqs(page["items"]))
            items += page["items"]
            cursor = page["cursor"]
            await asyncio.sleep(0)
        # the rest of the snapshot being read (the loop may stop inside one), then a snapshot
        # taken after the last admission
        rest, cursor, _, _ = await follow(api, top, cursor)
        items += rest + (await follow(api, top, cursor))[0]
        return items

    written, items = await asyncio.gather(writer(), reader())
    assert sorted(ids(items)) == sorted([top, d, *written])
    assert seqs(items) == sorted(set(seqs(items)))  # ascending, no duplicates


# --- page bounds -----------------------------------------------------------------------------


async def test_page_byte_bound_is_393216_bytes_of_items(api: Api) -> None:
    top = await space(api)
    d = await discussion(api, top)
    big = [await reply(api, d, "x" * 47_000 + str(i)) for i in range(10)]
    page = await get(api, top)
    sizes = [len(canonical(it)) for it in page["items"]]
    assert page["has_more"] is True
    assert sum(sizes) <= 393_216 < sum(sizes) + 48_000
    rest, _c, _s, _n = await follow(api, top, page["cursor"])
    assert ids(page["items"] + rest) == [top, d, *big]


async def test_at_least_one_item_even_when_it_exceeds_the_byte_bound(api: Api) -> None:
    api.library.limits = Limits(page_bytes=100)
    top = await space(api)
    members = [top] + [await discussion(api, top) for _ in range(3)]
    items, _c, _s, calls = await follow(api, top)
    assert ids(items) == members
    assert calls == 4  # one item per call, the last one says has_more false


async def test_scan_bound_counts_index_entries_and_always_progresses(api: Api) -> None:
    """"Scanned" = entries of the root's feed index read by the call.  Non-members are not in
    the index, so a burst of them costs no scan; members beyond the bound wait for the next
    call, behind a cursor just past the scanned range."""
    api.library.limits = Limits(scan=3)
    top = await space(api)
    members = [top]
    for i in range(7):
        members.append(await discussion(api, top))
        for _ in range(3):
            await space(api, f"noise {i}")  # non-members between the members
    page = await get(api, top)
    assert len(page["items"]) == 3 and page["has_more"] is True
    got = list(page["items"])
    calls = 1
    while page["has_more"]:
        before = page["items"][-1]["admission"]["sequence"] if page["items"] else 0
        page = await get(api, top, page["cursor"])
        calls += 1
        assert len(page["items"]) <= 3
        assert not page["items"] or page["items"][0]["admission"]["sequence"] > before
        got += page["items"]
    assert ids(got) == members
    assert calls == 3  # 3 + 3 + 2: the last call read fewer than the bound, so it is complete
    # a bound hit exactly at hi ends the snapshot: no empty extra call
    api.library.limits = Limits(scan=2)
    page = await get(api, top, page["cursor"])
    assert page["items"] == [] and page["has_more"] is False
    extra = [await discussion(api, top), await discussion(api, top)]
    page = await get(api, top, page["cursor"])
    assert ids(page["items"]) == extra and page["has_more"] is False


async def test_default_scan_bound_is_the_contract_bound() -> None:
    assert changes.SCAN_LIMIT == 10_000
    assert CONTRACT["limits"]["changes_item_bytes"] == changes.PAGE_BYTES
    assert CONTRACT["limits"]["page_size"] == changes.MAX_LIMIT
    assert changes.scan_count(50, Limits()) == 51
    assert changes.scan_count(50, Limits(scan=7)) == 7


# --- parameters ------------------------------------------------------------------------------


async def test_root_parameter(api: Api) -> None:
    top = await space(api)
    d = await discussion(api, top)
    revised = (await api.publish("peer", {"kind": "discussion", "title": "d2",
                                          "body": {"text": "d"},
                                          "links": [{"relation": "contained_in", "target": top}],
                                          "previous": d}))["id"]
    r = await api.client.get("/api/changes")
    assert r.status_code == 400 and r.json()["code"] == "MISSING_PARAMETER"
    for bad in ("xyz", top.upper(), top[:-1], top + "0", top + "\n"):
        r = await api.client.get("/api/changes", params={"root": bad})
        assert r.status_code == 400 and r.json()["code"] == "BAD_PARAMETER"
    r = await api.client.get("/api/changes", params={"root": "0" * 64})
    assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_ROOT"
    r = await api.client.get("/api/changes", params={"root": revised})
    assert r.status_code == 400
    assert r.json()["code"] == "NOT_A_ROOT" and r.json()["details"]["root"] == d
    r = await api.client.get("/api/changes", params={"root": top, "since": "1"})
    assert r.status_code == 400 and r.json()["code"] == "UNKNOWN_PARAMETER"
    r = await api.client.get(f"/api/changes?root={top}&root={top}")
    assert r.status_code == 400 and r.json()["code"] == "REPEATED_PARAMETER"
    r = await api.client.post(f"/api/changes?root={top}")
    assert r.status_code == 405


# --- cursor integrity: 400 -------------------------------------------------------------------


def _flip(text: str, index: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    raw[index] ^= 0x01
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


async def test_forged_truncated_malformed_and_other_root_cursors_are_400(api: Api) -> None:
    top = await space(api)
    other = await space(api, "other")
    for _ in range(3):
        await discussion(api, top)
    page = await get(api, top, limit=1)
    cursor = page["cursor"]
    assert len(cursor) == changes.CURSOR_CHARS
    await get(api, top, cursor)  # the genuine cursor works

    async def refused(c: str, code: str, root: str = top) -> None:
        r = await api.client.get("/api/changes", params={"root": root, "cursor": c})
        assert r.status_code == 400, (c, r.text)
        body = r.json()
        assert body["code"] == code, body
        assert "resync_required" not in body

    # every byte of the cursor is protected: body fields and MAC alike
    for index in range(changes.CURSOR_BYTES):
        await refused(_flip(cursor, index), "CURSOR_FORGED")
    await refused(cursor[:-1], "CURSOR_MALFORMED")  # truncated
    await refused(cursor[:-4], "CURSOR_MALFORMED")
    await refused(cursor[: len(cursor) // 2], "CURSOR_MALFORMED")
    await refused(cursor + "A", "CURSOR_MALFORMED")
    await refused(cursor + "=", "CURSOR_MALFORMED")
    await refused(cursor + "\n", "CURSOR_MALFORMED")
    await refused("", "CURSOR_MALFORMED")
    await refused("!" + cursor[1:], "CURSOR_MALFORMED")
    await refused(cursor.replace(cursor[5], "+" if cursor[5] != "+" else "/"), "CURSOR_MALFORMED")
    # the spare low bits of the last character: same bytes, non-canonical text
    last = cursor[-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    sibling = alphabet[alphabet.index(last) ^ 1]
    await refused(cursor[:-1] + sibling, "CURSOR_MALFORMED")
    # a genuine cursor of another root
    await refused(cursor, "CURSOR_OTHER_ROOT", root=other)
    # well-formed cursors minted with another secret (another library) or another version
    secret = bytes(32)
    c = changes.decode_cursor(cursor, await _secret(api))
    await refused(changes.encode_cursor(c, secret), "CURSOR_FORGED")
    forged = Cursor(c.epoch, c.root, c.hi + 1000, c.after, c.anchor)
    await refused(changes.encode_cursor(forged, secret), "CURSOR_FORGED")


async def _secret(api: Api) -> bytes:
    value = await api.library.storage.meta("cursor_secret")
    assert value is not None
    return bytes.fromhex(value)


async def test_cursor_fields_are_bound(api: Api) -> None:
    """With the server's own secret (as if it had leaked) the decoder still refuses an
    inverted range; and the cursor round-trips exactly."""
    top = await space(api)
    await discussion(api, top)
    page = await get(api, top, limit=1)
    secret = await _secret(api)
    c = changes.decode_cursor(page["cursor"], secret)
    assert (c.root, c.after, c.hi) == (top, page["items"][0]["admission"]["sequence"],
                                       page["snapshot"])
    assert changes.encode_cursor(c, secret) == page["cursor"]
    inverted = Cursor(c.epoch, c.root, c.after, c.hi, c.anchor) if c.after < c.hi else None
    assert inverted is not None
    with pytest.raises(changes.BadCursor):
        changes.decode_cursor(changes.encode_cursor(inverted, secret), secret)


# --- cursors that cannot be honoured: 409 resync_required -----------------------------------


def _database(api: Api) -> Path | str:
    storage = api.library.storage
    return str(getattr(storage, "url", storage.path))


async def _backup(api: Api, dest: Path) -> None:
    """An online backup (``alexandria backup``) of the live database."""
    await asyncio.to_thread(backup.backup, _database(api), dest)


async def _restore(api: Api, backup_file: Path) -> None:
    """Stop the storage, restore the backup over the database (``alexandria restore
    --replace``), start a new storage on it (what an operator restoring a backup does)."""
    db = _database(api)
    await api.library.storage.close()
    await asyncio.to_thread(backup.restore, backup_file, db, True)
    fresh = storage_for(db, api.library.genesis)
    fresh.clock = api.clock
    await fresh.open()
    api.library.storage = fresh


async def assert_resync(api: Api, root: str, cursor: str, code: str) -> None:
    r = await api.client.get("/api/changes", params={"root": root, "cursor": cursor})
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["resync_required"] is True
    assert body["code"] == code
    assert set(body) == {"error", "code", "details", "resync_required"}


async def test_cursor_against_a_restored_older_backup_is_409(api: Api, tmp_path: Path) -> None:
    top = await space(api)
    d = await discussion(api, top)
    for i in range(3):
        await reply(api, d, f"early {i}")
    old_items, old_cursor, old_hi, _n = await follow(api, top)
    backup_file = tmp_path / "backup.db"
    await _backup(api, backup_file)
    # the library grows past the backup; a follower catches up and holds cursors past it
    for i in range(4):
        await reply(api, d, f"later {i}")
    mid = await get(api, top, limit=2)  # has_more: a cursor inside a snapshot past the backup
    assert mid["has_more"] is True
    _items, done_cursor, hi, _n = await follow(api, top)  # caught up: after = hi past the backup

    await _restore(api, backup_file)
    assert await api.library.storage.log_size() == old_hi < hi
    await assert_resync(api, top, done_cursor, "CURSOR_BEYOND_LOG")
    await assert_resync(api, top, mid["cursor"], "CURSOR_BEYOND_LOG")
    # a cursor issued against the backup's own log is still honoured: nothing was lost for it
    page = await get(api, top, old_cursor)
    assert page["items"] == [] and page["snapshot"] == old_hi

    # the restored library grows again past the old cursors, with different entries
    for i in range(6):
        await reply(api, d, f"different {i}")
    assert await api.library.storage.log_size() > hi
    await assert_resync(api, top, done_cursor, "LOG_DIVERGED")
    await assert_resync(api, top, mid["cursor"], "LOG_DIVERGED")
    # starting over gives the restored library's feed, and the old-prefix cursor continues it
    fresh, _c, _h, _n = await follow(api, top)
    assert ids(fresh)[: len(old_items)] == ids(old_items)
    cont, _c, _h, _n = await follow(api, top, old_cursor)
    assert ids(old_items) + ids(cont) == ids(fresh)


async def test_epoch_change_is_409(api: Api) -> None:
    top = await space(api)
    await discussion(api, top)
    page = await get(api, top, limit=1)

    def bump(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE meta SET value = 'another epoch' WHERE key = 'epoch'")

    await api.library.storage.write(bump)
    await assert_resync(api, top, page["cursor"], "EPOCH_CHANGED")
    items, _c, _h, _n = await follow(api, top)
    assert len(items) == 2


async def test_other_root_is_checked_before_honouring(api: Api) -> None:
    """A genuine cursor of another root is 400 even when it could not be honoured either."""
    top = await space(api)
    other = await space(api, "other")
    page = await get(api, top)

    def bump(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE meta SET value = 'another epoch' WHERE key = 'epoch'")

    await api.library.storage.write(bump)
    r = await api.client.get("/api/changes", params={"root": other, "cursor": page["cursor"]})
    assert r.status_code == 400 and r.json()["code"] == "CURSOR_OTHER_ROOT"


# --- the pure parts --------------------------------------------------------------------------


def test_fill_page_rules() -> None:
    lim = Limits(page_bytes=10, scan=100)
    win = changes.Window(after=4, hi=20, anchor=None)

    def fetch(seq: int) -> bytes:
        return b"x" * 4

    # limit stops: the rest is still to come
    page = changes.fill_page(win, [5, 6, 7], fetch, 2, lim)
    assert (len(page.items), page.after, page.has_more) == (2, 6, True)
    # fewer than the scan count read: the window is exhausted
    page = changes.fill_page(win, [5, 6], fetch, 2, lim)
    assert (len(page.items), page.after, page.has_more) == (2, 20, False)
    # bytes stop after two items of 4 bytes (bound 10)
    page = changes.fill_page(win, [5, 6, 7], fetch, 5, lim)
    assert (len(page.items), page.after, page.has_more) == (2, 6, True)
    # at least one item, whatever its size
    page = changes.fill_page(win, [5, 6], lambda s: b"y" * 50, 5, lim)
    assert (len(page.items), page.after, page.has_more) == (1, 5, True)
    # the scan bound: two entries read out of a bound of two
    page = changes.fill_page(win, [8, 9], fetch, 50, Limits(page_bytes=99, scan=2))
    assert (len(page.items), page.after, page.has_more) == (2, 9, True)
    page = changes.fill_page(win, [8, 20], fetch, 50, Limits(page_bytes=99, scan=2))
    assert (page.after, page.has_more) == (20, False)
    # nothing in the window
    page = changes.fill_page(win, [], fetch, 50, lim)
    assert (page.items, page.after, page.hi, page.has_more) == ([], 20, 20, False)


def test_render_is_json_with_sorted_keys() -> None:
    page = changes.Page([b'{"a":1}', b'{"b":2}'], 3, 9, True)
    assert changes.render(page, "CUR") == (
        b'{"cursor":"CUR","has_more":true,"items":[{"a":1},{"b":2}],"snapshot":9}'
    )


# --- properties of the pure parts (hypothesis) -----------------------------------------------

_roots = st.binary(min_size=32, max_size=32).map(bytes.hex)
_seq = st.integers(min_value=0, max_value=changes.MAX_SEQUENCE)


@st.composite
def _cursors(draw: st.DrawFn) -> Cursor:
    hi = draw(_seq)
    after = draw(st.integers(min_value=0, max_value=hi))
    return Cursor(draw(st.binary(min_size=16, max_size=16)), draw(_roots), hi, after,
                  draw(st.binary(min_size=16, max_size=16)))


@given(_cursors(), st.binary(min_size=32, max_size=32))
def test_cursor_round_trips(c: Cursor, secret: bytes) -> None:
    text = changes.encode_cursor(c, secret)
    assert len(text) == changes.CURSOR_CHARS
    assert changes.decode_cursor(text, secret) == c


@given(_cursors(), st.binary(min_size=32, max_size=32), st.data())
def test_any_bit_flip_or_cut_is_refused(c: Cursor, secret: bytes, data: st.DataObject) -> None:
    text = changes.encode_cursor(c, secret)
    raw = bytearray(base64.urlsafe_b64decode(text + "="))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= 1 << data.draw(st.integers(0, 7))
    flipped = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    with pytest.raises(changes.BadCursor) as exc:
        changes.decode_cursor(flipped, secret)
    assert exc.value.code == "CURSOR_FORGED"
    cut = data.draw(st.integers(0, len(text) - 1))
    with pytest.raises(changes.BadCursor):
        changes.decode_cursor(text[:cut], secret)


@given(st.text(max_size=300))
def test_arbitrary_text_is_a_400_never_a_crash(text: str) -> None:
    with pytest.raises(changes.BadCursor):
        changes.decode_cursor(text, bytes(32))


@given(
    after=st.integers(0, 1000), width=st.integers(0, 1000), data=st.data(),
    limit=st.integers(1, 50), page_bytes=st.integers(1, 400), scan=st.integers(1, 60),
)
def test_fill_page_invariants(after: int, width: int, data: st.DataObject, limit: int,
                              page_bytes: int, scan: int) -> None:
    hi = after + width
    lim = Limits(page_bytes=page_bytes, scan=scan)
    members = sorted(data.draw(st.sets(st.integers(after + 1, hi), max_size=80)) if width
                     else set())
    sizes = {s: data.draw(st.integers(1, 120)) for s in members}
    scanned = members[: changes.scan_count(limit, lim)]  # what the index range read returns
    page = changes.fill_page(changes.Window(after, hi, None), scanned,
                             lambda s: b"x" * sizes[s], limit, lim)
    got = scanned[: len(page.items)]
    assert [len(i) for i in page.items] == [sizes[s] for s in got]  # a prefix, in order
    assert len(page.items) <= limit
    assert len(page.items) <= 1 or sum(map(len, page.items)) <= page_bytes
    if members:
        assert page.items, "at least one item when any remains"
    assert page.hi == hi
    if page.has_more:
        assert after <= page.after < hi and page.after == got[-1]
        bound_hit = len(scanned) == changes.scan_count(limit, lim)
        assert members[len(got):] or bound_hit, "has_more only when something may remain"
    else:
        assert page.after == hi and got == members, "complete: everything, and after = hi"
