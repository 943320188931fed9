"""Finding things by id and paging the log, in headless Chromium against a live server on each
backend (the same set-up as ``tests/api/test_browser.py``), at desktop and phone widths."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from alexandria.core.timestamps import format_ms
from alexandria.service.bootstrap import Founding
from tests.support.browser import (
    BROWSER_MARKS,
    LiveServer,
    axe_violations,
    badge_settled,
    chromium,
    wait,
    worked_example_library,
)
from tests.support.liveserver import NewDb

pytestmark = BROWSER_MARKS
WIDTHS = (1280, 390)
EXTRA_CLAIMS = 30  # with the worked example: more than two pages of the log


def _numbered_claims(url: str, founding: Founding) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(EXTRA_CLAIMS):
            content = {"kind": "claim", "title": f"Numbered claim {i}", "links": [],
                       "previous": "", "body": {"statement": f"{i} is a number",
                                                "scope": "integers", "assumptions": []}}
            env = founding.participants["owner"].envelope(
                founding.genesis, content, format_ms(int(time.time() * 1000)))
            assert client.post("/api/entries", json=env).status_code == 201


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb
         ) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    yield from worked_example_library(tmp_path_factory, module_db, b"alexandria-lookup-test",
                                      _numbered_claims)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with chromium(tmp_path_factory.mktemp("chromium-lookup")) as browser:
        yield browser


def _no_horizontal_scroll(driver: Any) -> None:
    overflow = driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow} px"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_search_box_goes_to_what_a_printed_id_names(
    live: tuple[LiveServer, dict[str, str]], driver: Any, width: int
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    server, names = live
    driver.set_window_size(width, 900)
    try:
        driver.get(server.url + "/")
        box = driver.find_element(By.ID, "q")
        box.send_keys(names["merge"][:12])
        # typing: the live results offer the page it names
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "p.found-id a"),
             "the live results name the revision")
        offered = driver.find_element(By.CSS_SELECTOR, "p.found-id a")
        assert offered.get_attribute("href").endswith(f"/revisions/{names['merge']}")
        box.send_keys(Keys.ENTER)
        wait(driver, lambda d: d.current_url.endswith(f"/revisions/{names['merge']}"),
             "Enter opens the revision page")
        # a page addressed by a prefix goes to the full id
        driver.get(f"{server.url}/objects/{names['claim'][:10]}")
        wait(driver, lambda d: d.current_url.endswith(f"/objects/{names['claim']}"),
             "the object page of the prefix")
        # an id nothing has: the catalogue says so
        driver.get(f"{server.url}/?q=fedcba9876543")
        assert "No id begins with" in driver.find_element(By.ID, "results").text
        _no_horizontal_scroll(driver)
        assert not axe_violations(driver)
    finally:
        driver.set_window_size(1280, 1000)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_log_pages_both_ways_and_goes_to_an_entry(
    live: tuple[LiveServer, dict[str, str]], driver: Any, width: int
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    server, _names = live
    size = int(httpx.get(f"{server.url}/api/log/checkpoint").text.split("\n")[1])

    def numbers() -> list[int]:
        return [int(r.get_attribute("id").removeprefix("entry-"))
                for r in driver.find_elements(By.CSS_SELECTOR, "table.entries tbody tr")]

    driver.set_window_size(width, 900)
    try:
        driver.get(server.url + "/log")
        assert numbers()[0] == size
        driver.find_element(By.LINK_TEXT, "Older entries").click()
        wait(driver, lambda d: numbers() and numbers()[0] == size - 20, "the older page")
        driver.find_element(By.LINK_TEXT, "Newer entries").click()
        wait(driver, lambda d: numbers() and numbers()[0] == size, "back to the newest")
        driver.find_element(By.LINK_TEXT, "Older entries").click()
        wait(driver, lambda d: "before=" in d.current_url, "older again")
        driver.find_element(By.LINK_TEXT, "Oldest").click()
        wait(driver, lambda d: numbers() and numbers()[-1] == 1, "the oldest page")
        field = driver.find_element(By.ID, "entry")
        field.clear()
        field.send_keys("25", Keys.ENTER)
        wait(driver, lambda d: "entry=25" in d.current_url, "go to entry 25")
        target = driver.find_element(By.CSS_SELECTOR, "tr.target")
        assert target.get_attribute("id") == "entry-25"
        _no_horizontal_scroll(driver)
        assert not axe_violations(driver)
    finally:
        driver.set_window_size(1280, 1000)


def test_a_revision_is_entry_n_and_its_leaf_index_is_labelled(
    live: tuple[LiveServer, dict[str, str]], driver: Any
) -> None:
    from selenium.webdriver.common.by import By


    server, names = live
    seq = httpx.get(f"{server.url}/api/entries/{names['merge']}").json()["admission"]["sequence"]
    driver.get(f"{server.url}/revisions/{names['merge']}")
    # every check held; no pin of the reader's own is set, so the badge is neutral
    assert wait(driver, badge_settled, "the badge settles") == "unpinned"
    facts = driver.find_element(By.TAG_NAME, "main").text
    assert f"entry {seq}" in facts and f"leaf index {seq - 1}" in facts
    assert "Admission sequence" not in facts and "(log leaf" not in facts
    badge = driver.find_element(By.ID, "verification").get_attribute("textContent")
    assert f"entry {seq}'s leaf recomputed" in badge, badge
    assert f"leaf index {seq - 1}" in badge, badge
    driver.find_element(By.LINK_TEXT, f"entry {seq}").click()
    wait(driver, lambda d: d.current_url.endswith(f"/log?entry={seq}"), "the log at the entry")
    assert driver.find_element(By.CSS_SELECTOR, "tr.target").get_attribute("id") == f"entry-{seq}"
