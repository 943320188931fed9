"""Links, history and authors in a real browser (headless Chromium, as ``test_browser.py``), at
a desktop and a phone width: no page is wider than the viewport (64-hex ids wrap), history is
newest first, the compare form leads to the diff of the two revisions chosen, links read as
kind and title, times show the exact time on hover, an empty library's home says how to
contribute, and axe-core finds no serious violation on any of these pages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alexandria.service.bootstrap import found_library
from tests.support.browser import (
    BROWSER_MARKS,
    SHOTS,
    LiveServer,
    axe_violations,
    chromium,
    wait,
    worked_example_library,
)
from tests.support.liveserver import NewDb

pytestmark = BROWSER_MARKS
WIDTHS = (1280, 390)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb
            ) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    yield from worked_example_library(tmp_path_factory, module_db, b"alexandria-browser-history")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with chromium(tmp_path_factory.mktemp("chromium-history")) as driver:
        yield driver


def at_width(driver: Any, width: int) -> None:
    """A viewport ``width`` CSS pixels wide (a phone's at 390: headless Chromium's windows have
    a minimum width, so the device metrics are emulated as the developer tools do)."""
    if width < 1280:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    else:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        driver.set_window_size(width, 1000)


def phone_shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def fits(driver: Any, what: str) -> None:
    """The page is no wider than the viewport: nothing to scroll sideways."""
    scroll, client = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert scroll <= client, f"{what}: {scroll} px wide in a {client} px viewport"


def main_text(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "main").text)


@pytest.mark.parametrize("width", WIDTHS)
def test_pages_fit_the_viewport_and_stay_accessible(
    library: tuple[LiveServer, dict[str, str]], browser: Any, width: int
) -> None:
    server, names = library
    at_width(browser, width)
    owner = publish_actor(server, names)
    paths = {
        "revision": f"/revisions/{names['merge']}",
        "first-revision": f"/revisions/{names['claim']}",
        "claim": f"/objects/{names['claim']}",
        "evidence": f"/objects/{names['evidence']}",
        "proposal": f"/objects/{names['proposal']}",
        "compare": f"/objects/{names['claim']}/compare?from={names['claim']}&to={names['merge']}",
        "author": f"/authors/{owner}",
        "home": "/",
    }
    for name, path in paths.items():
        browser.get(server.url + path)
        fits(browser, f"{path} at {width} px")
        assert axe_violations(browser) == [], path
        assert browser.execute_script("return window.innerWidth") == width
        if name in ("revision", "claim", "compare"):
            phone_shot(browser, f"history-{name}-{width}")
    # the revision page's full id wraps inside the viewport instead of being cut off
    browser.get(server.url + paths["revision"])
    right = browser.execute_script(
        "const c = document.querySelector('main p.meta code.id');"
        "return c.getBoundingClientRect().right")
    assert right <= browser.execute_script("return document.documentElement.clientWidth")


def publish_actor(server: LiveServer, names: dict[str, str]) -> str:
    import httpx

    signed = httpx.get(f"{server.url}/api/entries/{names['claim']}", timeout=30).json()
    return str(signed["record"]["author"])


@pytest.mark.parametrize("width", WIDTHS)
def test_history_newest_first_and_compare_any_two(
    library: tuple[LiveServer, dict[str, str]], browser: Any, width: int
) -> None:
    from selenium.webdriver.common.by import By

    server, names = library
    at_width(browser, width)
    browser.get(f"{server.url}/objects/{names['claim']}")
    entries = browser.find_elements(By.CSS_SELECTOR, "ol.history > li")
    assert [e.get_attribute("id") for e in entries] == ["rev-2", "rev-1"]
    assert "current" in entries[0].find_element(By.CSS_SELECTOR, ".rev-title").text
    links = entries[1].find_element(By.CSS_SELECTOR, ".rev-links").text
    assert "cur" in links and "prev" in links and "characters" in links
    delta = entries[0].find_element(By.CSS_SELECTOR, ".delta").text
    assert delta[0] in "+−±", delta
    # hovering a time shows the exact time: its title
    t = entries[0].find_element(By.TAG_NAME, "time")
    assert t.get_attribute("title") == t.get_attribute("datetime")
    assert t.text.endswith("ago") or t.text.startswith("in ") or t.text == "just now"
    # compare: revision 1 as "from", revision 2 as "to", submitted from the form
    entries[1].find_element(By.CSS_SELECTOR, 'input[name="from"]').click()
    entries[0].find_element(By.CSS_SELECTOR, 'input[name="to"]').click()
    browser.find_element(By.CSS_SELECTOR, "form.compare button[type=submit]").click()
    wait(browser, lambda d: "/compare?" in d.current_url, "the compare page")
    assert f"from={names['claim']}" in browser.current_url
    assert f"to={names['merge']}" in browser.current_url
    text = main_text(browser)
    assert "Revision 1 of 2" in text and "Revision 2 of 2" in text
    removed = browser.find_elements(By.CSS_SELECTOR, "pre.diff .d-removed")
    assert any("Natural numbers with standard addition" in e.text for e in removed)
    fits(browser, f"compare at {width} px")
    # prev on revision 2 leads to the same comparison
    browser.get(f"{server.url}/objects/{names['claim']}")
    browser.find_element(By.CSS_SELECTOR, "#rev-2 .rev-links a[title^='compare with the prev']"
                         ).click()
    wait(browser, lambda d: "/compare?" in d.current_url, "prev")
    assert "Revision 1 of 2" in main_text(browser)


@pytest.mark.parametrize("width", WIDTHS)
def test_links_read_as_kind_and_title(
    library: tuple[LiveServer, dict[str, str]], browser: Any, width: int
) -> None:
    from selenium.webdriver.common.by import By

    server, names = library
    at_width(browser, width)
    browser.get(f"{server.url}/objects/{names['evidence']}")
    link = browser.find_element(By.CSS_SELECTOR, f'dd a[href="/revisions/{names["claim"]}"]')
    assert link.text.lower() == "claim claim"  # the kind tag (upper case in CSS), the title
    target = link.find_element(By.XPATH, "./ancestor::span[@class='target']")
    assert "superseded: revision 1 of 2 · current: One plus one equals two" in target.text
    assert names["claim"][:12] not in main_text(browser)
    # in the claim's history diff, the merged proposal by kind and title
    browser.get(f"{server.url}/objects/{names['claim']}")
    added = browser.find_elements(By.CSS_SELECTOR, "pre.diff .d-added")
    assert any(f'link: merges proposal "Proposal" ({names["proposal"][:12]})' in e.text
               for e in added)
    # each item once: the proposal and the relationship in their own sections only
    for name in ("proposal", "relationship"):
        found = browser.find_elements(By.CSS_SELECTOR, f'main a[href="/objects/{names[name]}"]')
        assert len(found) == 1, name


@pytest.mark.parametrize("width", WIDTHS)
def test_an_empty_library_says_how_to_contribute(
    tmp_path_factory: pytest.TempPathFactory, module_db: NewDb, browser: Any, width: int
) -> None:
    founding = found_library(seed=b"alexandria-browser-empty",
                             created_at="2026-01-01T00:00:00.000Z")
    server = LiveServer(module_db(tmp_path_factory.mktemp("browser-empty") / "lib.db"), founding)
    try:
        at_width(browser, width)
        browser.get(server.url + "/")
        text = main_text(browser)
        assert "alexandria login" in text and "alexandria publish" in text
        assert founding.genesis.pin in text.replace("\n", "")
        fits(browser, f"empty home at {width} px")
        assert axe_violations(browser) == []
    finally:
        server.stop()
