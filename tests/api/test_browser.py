"""The pages in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
installed by ``.ci/run``) driven by Selenium against a live server on 127.0.0.1.

A reader browses the worked example: searches, opens the merged claim, follows its evidence,
sees its history with the diff, and sees the revision page's badge say *verified*, computed
by the page's own script with WebCrypto.  A server that alters inclusion proofs makes the badge
say why it failed; a page served from a host that is not a secure context says it cannot
verify.  axe-core (vendored, ``tests/browser_assets``) checks every page for serious
accessibility violations.  Every test runs against a library on each backend (``module_db``).
Screenshots go to ``tests/screenshots/`` (git-ignored).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from alexandria.core import merkle, note
from alexandria.core.canonical import canonical
from alexandria.core.checkpoint import parse_checkpoint
from alexandria.core.keys import SigningKey
from alexandria.service.bootstrap import found_library
from alexandria.service.cosigning import Cosigning, WitnessEndpoint
from alexandria.store import cosignatures
from alexandria.store.postgresql import is_database_url
from tests.support.browser import (
    BROWSER_MARKS,
    LiveServer,
    axe_violations,
    badge_settled,
    chromium,
    forget_reader_trust,
    publish_worked_example,
    set_reader_trust,
    shot,
    wait,
    worked_example_library,
)
from tests.support.library import SEED, T0
from tests.support.liveserver import NewDb

pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb
         ) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    yield from worked_example_library(tmp_path_factory, module_db, b"alexandria-browser-test")


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # a name that is not a secure context, still resolved to loopback
    with chromium(tmp_path_factory.mktemp("chromium-profile"),
                  "--host-resolver-rules=MAP library.test 127.0.0.1") as browser:
        yield browser


def test_reader_browses_the_worked_example(live: tuple[LiveServer, dict[str, str]],
                                           driver: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    server, names = live
    assert set_reader_trust(driver, server.url, server.pin).startswith("Saved")
    driver.get(server.url + "/")
    assert driver.title.startswith("Catalogue")
    shot(driver, "01-catalogue")

    # search
    box = driver.find_element(By.ID, "q")
    box.send_keys("Peano", Keys.ENTER)
    wait(driver, lambda d: "q=Peano" in d.current_url, "the search was submitted")
    claim_link = wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'#results a[href="/objects/{names["claim"]}"]'),
        "the merged claim is found",
    )[0]
    shot(driver, "02-search")

    # open the merged claim
    claim_link.click()
    wait(driver, lambda d: d.current_url.endswith(f"/objects/{names['claim']}"), "claim page")
    text = driver.find_element(By.TAG_NAME, "main").text
    assert "Natural numbers under Peano axioms" in text
    for heading in ("Evidence", "Assessments", "Discussions", "Proposals", "Relationships",
                    "History"):
        assert driver.find_elements(By.XPATH, f"//h2[starts-with(normalize-space(), '{heading}')]")
    # its history, with the diff between the two revisions
    removed = driver.find_elements(By.CSS_SELECTOR, "pre.diff .d-removed")
    added = driver.find_elements(By.CSS_SELECTOR, "pre.diff .d-added")
    assert any("Natural numbers with standard addition" in e.text for e in removed)
    assert any("Natural numbers under Peano axioms" in e.text for e in added)
    shot(driver, "03-claim")

    # follow its evidence
    driver.find_element(By.CSS_SELECTOR,
                        f'.section-evidence a[href="/objects/{names["evidence"]}"]').click()
    wait(driver, lambda d: d.current_url.endswith(f"/objects/{names['evidence']}"), "evidence")
    main = driver.find_element(By.TAG_NAME, "main").text
    assert "The successor of one is two." in main and "Sources" in main
    shot(driver, "04-evidence")
    driver.back()

    # the merge's revision page: the badge says verified
    wait(driver, lambda d: d.current_url.endswith(f"/objects/{names['claim']}"), "back")
    driver.find_element(By.CSS_SELECTOR, f'.history a[href="/revisions/{names["merge"]}"]').click()
    assert wait(driver, badge_settled, "the badge settles") == "ok", \
        driver.find_element(By.ID, "verification").text
    badge = driver.find_element(By.ID, "badge").text
    assert badge.startswith("Verified against your pin"), badge
    steps = driver.find_elements(By.CSS_SELECTOR, "#verify-steps li.ok")
    assert len(steps) == 7, [s.text for s in steps]
    shot(driver, "05-revision-verified")


def test_tampered_proof_fails_the_badge_with_its_reason(
    live: tuple[LiveServer, dict[str, str]], driver: Any
) -> None:
    from selenium.webdriver.common.by import By

    server, names = live
    set_reader_trust(driver, server.url, server.pin)
    server.app.enabled = True
    try:
        driver.get(f"{server.url}/revisions/{names['evidence']}")
        assert wait(driver, badge_settled, "the badge settles") == "bad"
    finally:
        server.app.enabled = False
    badge = driver.find_element(By.ID, "badge").text
    assert badge.startswith("Not verified"), badge
    assert "inclusion proof does not lead to the checkpoint's root" in badge
    failed = driver.find_elements(By.CSS_SELECTOR, "#verify-steps li.fail")
    assert len(failed) == 1
    shot(driver, "06-revision-tampered")
    driver.get(f"{server.url}/revisions/{names['evidence']}")  # the honest server verifies
    assert wait(driver, badge_settled, "the badge settles") == "ok"


def test_no_badge_outside_a_secure_context(
    live: tuple[LiveServer, dict[str, str]], driver: Any
) -> None:
    from selenium.webdriver.common.by import By

    server, names = live
    driver.get(f"http://library.test:{server.port}/revisions/{names['claim']}")
    assert wait(driver, badge_settled, "the badge settles") == "unavailable"
    badge = driver.find_element(By.ID, "badge").text
    assert "only available on HTTPS or on http://127.0.0.1" in badge
    shot(driver, "07-revision-insecure-context")


def test_badge_names_the_servers_refusal(
    tmp_path: Path, live: tuple[LiveServer, dict[str, str]], driver: Any, module_db: NewDb
) -> None:
    """A server without its log key cannot sign a checkpoint: the badge says so, with the
    typed error the server gave."""
    from selenium.webdriver.common.by import By

    founding = found_library(seed=b"alexandria-browser-test", created_at="2026-01-01T00:00:00.000Z")
    founding.enroll("owner")
    founding.enroll("peer")
    server = LiveServer(module_db(tmp_path / "lib.db"), founding, log_key=False)
    try:
        names = publish_worked_example(server.url, founding)
        driver.get(f"{server.url}/revisions/{names['claim']}")
        assert wait(driver, badge_settled, "the badge settles") == "bad"
        badge = driver.find_element(By.ID, "badge").text
        assert "/api/log/checkpoint answered 503" in badge and "[LOG_KEY_MISSING]" in badge
    finally:
        server.stop()


def test_live_search_updates_results_without_reload(
    live: tuple[LiveServer, dict[str, str]], driver: Any
) -> None:
    from selenium.webdriver.common.by import By

    server, names = live
    driver.get(server.url + "/")
    driver.execute_script("document.body.dataset.marker = 'same page'")
    driver.find_element(By.ID, "q").send_keys("successor")
    wait(driver, lambda d: "q=successor" in d.current_url, "the address follows the query")
    wait(driver, lambda d: d.find_elements(
        By.CSS_SELECTOR, f'#results a[href="/objects/{names["evidence"]}"]'), "results")
    assert driver.execute_script("return document.body.dataset.marker") == "same page"


def test_keyboard_reaches_the_content_first(
    live: tuple[LiveServer, dict[str, str]], driver: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    server, names = live
    driver.get(f"{server.url}/objects/{names['claim']}")
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    active = driver.switch_to.active_element
    assert active.text == "Skip to content"
    active.send_keys(Keys.ENTER)
    assert driver.switch_to.active_element.get_attribute("id") == "main"


def test_pages_have_no_serious_accessibility_violations(
    live: tuple[LiveServer, dict[str, str]], driver: Any
) -> None:
    server, names = live
    author = httpx.get(f"{server.url}/api/entries/{names['claim']}").json()["record"]["author"]
    paths = [
        "/", "/?q=Peano", f"/objects/{names['claim']}", f"/objects/{names['space']}",
        f"/objects/{names['discussion']}", f"/objects/{names['evidence']}",
        f"/objects/{names['proposal']}", f"/revisions/{names['merge']}", f"/authors/{author}",
        "/log", "/?kind=vote", "/trust",
    ]
    found = {}
    for path in paths:
        driver.get(server.url + path)
        if path.startswith("/revisions/"):
            wait(driver, badge_settled, "the badge settles")
        if path == f"/objects/{names['discussion']}":
            shot(driver, "08-discussion-thread")
        violations = axe_violations(driver)
        if violations:
            found[path] = violations
    assert not found, found


# --- the page's script agrees with the server's Python ----------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def script_page(live: tuple[LiveServer, dict[str, str]], driver: Any) -> Any:
    server, names = live
    driver.get(f"{server.url}/revisions/{names['claim']}")
    wait(driver, badge_settled, "the badge settles")
    return driver


@settings(max_examples=40, deadline=None)
@given(values=st.lists(JSON_VALUES, min_size=1, max_size=25))
@example(values=[{"__proto__": False}, {"hasOwnProperty": 1, "constructor": [None]}])
def test_browser_jcs_is_rfc8785(script_page: Any, values: list[Any]) -> None:
    """The script's canonical form is byte for byte ``core.canonical`` (non-BMP keys sort by
    UTF-16 code units, escapes, integers): the record id and the leaf bytes depend on it."""
    # the values travel as JSON text parsed in the page, as the page gets its records: the
    # WebDriver's own argument transport assigns keys, so "__proto__" would set a prototype
    # and a key "hasOwnProperty" breaks its walk, neither of which a parsed record can do
    got = script_page.execute_script(
        "return arguments[0].map((t) => window.AlexandriaVerify.jcs(JSON.parse(t)));",
        [json.dumps(v) for v in values],
    )
    assert got == [canonical(v).decode() for v in values]


def test_browser_inclusion_matches_rfc9162(script_page: Any) -> None:
    """Every (index, size) up to 33 leaves: the script recomputes the root from the server's
    proofs, and a proof with a flipped, missing or extra hash never gives the root."""
    leaves = [merkle.leaf_hash(b"leaf %d" % i) for i in range(33)]

    def node(level: int, idx: int) -> bytes:
        return merkle.root_from_leaves(leaves[idx << level:(idx + 1) << level])

    cases, expected = [], []
    for size in range(1, 34):
        root = merkle.root_from_leaves(leaves[:size]).hex()
        for index in range(size):
            proof = [p.hex() for p in merkle.inclusion_proof(index, size, node)]
            cases.append([index, size, leaves[index].hex(), proof])
            expected.append(root)
            if proof:
                bad = [("0" if proof[0][0] != "0" else "1") + proof[0][1:], *proof[1:]]
                for broken in (bad, proof[:-1], [*proof, proof[0]]):
                    cases.append([index, size, leaves[index].hex(), broken])
                    expected.append("not " + root)
    got = script_page.execute_async_script(
        "const done = arguments[arguments.length - 1]; const V = window.AlexandriaVerify;"
        "(async () => { const out = []; for (const [i, n, leaf, proof] of arguments[0]) {"
        "  try { const hashes = proof.map(V.unhex);"
        "    out.push(V.hex(await V.rootFromInclusion(i, n, V.unhex(leaf), hashes)));"
        "  } catch (e) { out.push('error: ' + e.message); } } return out; })()"
        ".then(done, (e) => done(String(e)));",
        cases,
    )
    assert len(got) == len(expected)
    for case, want, have in zip(cases, expected, got, strict=True):
        if want.startswith("not "):
            assert have != want[4:], case
        else:
            assert have == want, case


def store_cosignature(db: Path | str, size: int, witness: str, line: str) -> None:
    """Store a witness's cosignature line as the cosigning loop would, from outside the
    server (its own connection to the library's database)."""
    if is_database_url(db):
        from alexandria.store.postgresql import connection

        with connection.connect(str(db)) as raw:  # autocommit: one statement
            cosignatures.store(cast(sqlite3.Connection,
                                    connection.PgConnection(raw, connection.Dialect())),
                               size, witness, line)
        return
    conn = sqlite3.connect(db, timeout=30)
    try:
        with conn:
            cosignatures.store(conn, size, witness, line)
    finally:
        conn.close()


def test_badge_checks_the_cosignatures_of_the_librarys_witnesses(
    tmp_path: Path, driver: Any, module_db: NewDb
) -> None:
    """A library with a witness (quorum 1): the badge refuses its checkpoint until the witness's
    cosignature/v1 line is served with it, then verifies it with WebCrypto and names it."""
    from selenium.webdriver.common.by import By

    founding = found_library(seed=SEED, created_at=T0)
    founding.enroll("owner")
    founding.enroll("peer")
    witness_key = SigningKey(b"w" * 32)
    name = "witness.example/w1"
    verifier = note.Verifier(name, note.COSIGNATURE_V1, witness_key.public_bytes)
    # the witness is never reached (port 9): the test itself plays its part below
    server = LiveServer(module_db(tmp_path / "lib.db"), founding, cosigning=Cosigning(
        [WitnessEndpoint("http://127.0.0.1:9", verifier)], quorum=1))
    try:
        names = publish_worked_example(server.url, founding)
        set_reader_trust(driver, server.url, server.pin)
        signed_note = httpx.get(f"{server.url}/api/log/checkpoint").text
        size = parse_checkpoint(signed_note)[0].size
        driver.get(f"{server.url}/revisions/{names['claim']}")
        assert wait(driver, badge_settled, "the badge settles") == "bad"
        assert "0/1 valid cosignatures" in driver.find_element(By.ID, "badge").text
        text = signed_note[: signed_note.index("\n\n") + 1].encode()
        line = note.cosign(text, name, witness_key, 1_767_225_600).line()
        store_cosignature(server.db, size, name, line)
        driver.get(f"{server.url}/revisions/{names['claim']}")
        assert wait(driver, badge_settled, "the badge settles") == "ok", \
            driver.find_element(By.ID, "verification").text
        steps = [s.text for s in driver.find_elements(By.CSS_SELECTOR, "#verify-steps li.ok")]
        assert any("cosigned by 1 of the library's witnesses (witness.example/w1)" in s
                   for s in steps), steps
        shot(driver, "09-revision-witnessed")

        # the reader trusts that witness themselves: the browser checks its cosignature
        assert set_reader_trust(driver, server.url, server.pin, (verifier.vkey,)) == (
            "Saved in this browser. Badges now check against your pin and your 1 witness.")
        driver.get(f"{server.url}/revisions/{names['claim']}")
        assert wait(driver, badge_settled, "the badge settles") == "ok"
        steps = [s.text for s in driver.find_elements(By.CSS_SELECTOR, "#verify-steps li.ok")]
        assert any("cosigned by 1 of your witnesses (witness.example/w1)" in s
                   for s in steps), steps
        assert "cosigned by 1 of your witnesses" in driver.find_element(By.ID, "badge").text

        # ... and a witness that never cosigned this log: not verified, whatever the page names
        other = note.Verifier("witness.example/mine", note.COSIGNATURE_V1,
                              SigningKey(b"m" * 32).public_bytes)
        set_reader_trust(driver, server.url, server.pin, (other.vkey,))
        driver.get(f"{server.url}/revisions/{names['claim']}")
        assert wait(driver, badge_settled, "the badge settles") == "bad"
        assert "0/1 valid cosignatures of your witnesses" in \
            driver.find_element(By.ID, "badge").text

        # a key id that is not the key's is refused by the form, and nothing is saved
        forged = other.vkey.split("+")
        forged[1] = "00000000" if forged[1] != "00000000" else "11111111"
        status = set_reader_trust(driver, server.url, server.pin, ("+".join(forged),))
        assert "is not the id of witness.example/mine's key; nothing was saved" in status
    finally:
        server.stop()


WIDTHS = {"desktop": 1280, "phone": 390}


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_badge_checks_against_the_readers_own_pin(
    live: tuple[LiveServer, dict[str, str]], driver: Any, width: int
) -> None:
    """The three states of a verified record — no pin of the reader's (neutral, naming the
    page's pin), the reader's pin (green), another pin (amber, both shown) — with the pin set
    through ``/trust``; a tampered record is red whatever the pin.  At desktop and phone
    widths, each state clean for axe-core."""
    from selenium.webdriver.common.by import By

    server, names = live
    revision = f"{server.url}/revisions/{names['claim']}"
    other_pin = "ab" * 32
    driver.set_window_size(width, 1000)
    found: dict[str, Any] = {}

    def check_page(label: str) -> None:
        assert driver.execute_script(
            "const b = document.getElementById('badge') || document.body;"
            "return b.scrollWidth <= b.clientWidth + 1") is True, label
        if violations := axe_violations(driver):
            found[label] = violations

    try:
        # none set: neutral, saying it checked against the pin the page states
        forget_reader_trust(driver, server.url)
        check_page("trust (nothing set)")
        driver.get(revision)
        assert wait(driver, badge_settled, "the badge settles") == "unpinned"
        badge = driver.find_element(By.ID, "badge")
        assert badge.text.startswith(f"Checked against the pin this page states, {server.pin}:")
        assert "You have not set a pin of your own" in badge.text
        assert badge.find_element(By.TAG_NAME, "a").get_attribute("href").endswith("/trust")
        assert "You have not set a pin of your own." in driver.find_element(
            By.ID, "reader-pin").text
        assert driver.find_element(By.ID, "library-pin").text == server.pin
        check_page("revision (no pin)")
        shot(driver, f"10-badge-unpinned-{width}")

        # a stored record the form would never have saved counts as none
        driver.execute_script("localStorage.setItem('alexandria.trust',"
                              " JSON.stringify({pin: '<b>x</b>', witnesses: [1, 'x+y+z']}))")
        driver.get(revision)
        assert wait(driver, badge_settled, "the badge settles") == "unpinned"

        # a malformed pin is refused on the page, and nothing is stored
        status = set_reader_trust(driver, server.url, "not-a-pin")
        assert status.startswith("A pin is 64 hex characters"), status
        driver.get(revision)
        assert wait(driver, badge_settled, "the badge settles") == "unpinned"

        # the reader's pin, typed on /trust: green
        assert set_reader_trust(driver, server.url, server.pin) == (
            "Saved in this browser. Badges now check against your pin.")
        assert driver.find_element(By.ID, "reader-pin").text == "✓ It is your pin."
        check_page("trust (pin set)")
        driver.get(revision)
        assert wait(driver, badge_settled, "the badge settles") == "ok", \
            driver.find_element(By.ID, "verification").text
        assert driver.find_element(By.ID, "badge").text.startswith(
            "Verified against your pin: signed by its author, certified up to your pinned genesis")
        check_page("revision (your pin)")
        shot(driver, f"11-badge-your-pin-{width}")

        # a tampered record is red, with the reason
        server.app.records = True
        try:
            driver.get(revision)
            assert wait(driver, badge_settled, "the badge settles") == "bad"
        finally:
            server.app.records = False
        badge_text = driver.find_element(By.ID, "badge").text
        assert badge_text.startswith("Not verified: the record does not hash to its revision id")
        assert badge_text.endswith("(your pin)")
        check_page("revision (tampered)")

        # another pin: amber, with both pins
        set_reader_trust(driver, server.url, other_pin)
        footer = driver.find_element(By.ID, "reader-pin").text
        assert footer == f"⚠ It is not your pin ({other_pin})."
        driver.get(revision)
        assert wait(driver, badge_settled, "the badge settles") == "differs"
        badge_text = driver.find_element(By.ID, "badge").text
        assert badge_text.startswith("Not your pin:")
        assert server.pin in badge_text and other_pin in badge_text
        assert driver.find_elements(By.CSS_SELECTOR, "#verify-steps li.fail") == []
        check_page("revision (another pin)")
        shot(driver, f"12-badge-another-pin-{width}")
    finally:
        driver.set_window_size(1280, 1000)
        forget_reader_trust(driver, server.url)
    assert not found, found
