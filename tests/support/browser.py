"""A real browser for the page tests: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven by Selenium, a live server in this process that can tamper with
what it serves, and the reader's steps the tests share."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from alexandria.api.app import create_app
from alexandria.core.timestamps import format_ms
from alexandria.service.bootstrap import Founding, found_library, resolve_refs
from alexandria.service.cosigning import Cosigning
from alexandria.service.library import Library
from alexandria.store.backends import storage_for
from tests.support.library import CONTRACT
from tests.support.liveserver import NewDb, free_port

CHROMIUM = shutil.which("chromium")


CHROMEDRIVER = shutil.which("chromedriver")


BROWSER_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="needs Debian's chromium and chromium-driver (bash .ci/run installs them)",
    ),
]


ASSETS = Path(__file__).resolve().parents[1] / "browser_assets"


SHOTS = Path(__file__).resolve().parents[1] / "screenshots"


WAIT_S = 30


Scope = MutableMapping[str, Any]


Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class TamperProofs:
    """ASGI wrapper: while ``enabled``, flips one hex digit of every inclusion proof served, as a
    lying or broken server would; while ``records``, changes one letter of the title of every
    signed record served (``/api/entries/{rev}``), the same length, its signature untouched."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.enabled = False
        self.records = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.enabled and scope["path"] == "/api/log/proof/inclusion":
            marker = b'"proof":["'
        elif self.records and scope["path"].startswith("/api/entries/"):
            marker = b'"title":"'
        else:
            await self.app(scope, receive, send)
            return

        async def altered(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                body: bytes = message["body"]
                at = body.index(marker) + len(marker)
                flipped = b"0" if body[at:at + 1] != b"0" else b"1"
                message = {**message, "body": body[:at] + flipped + body[at + 1:]}
            await send(message)

        await self.app(scope, receive, altered)


class LiveServer:
    """uvicorn serving the real app on 127.0.0.1 in a thread of this process."""

    def __init__(self, db: Path | str, founding: Founding, log_key: bool = True,
                 cosigning: Cosigning | None = None) -> None:
        import uvicorn

        self.db = db
        self.pin = founding.genesis.pin  # what a reader obtained out of band
        storage = storage_for(db, founding.genesis)
        library = Library(founding.genesis, storage, founding.log_key if log_key else None,
                          cosigning=cosigning or Cosigning())
        self.app = TamperProofs(create_app(library))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                http="h11", ws="none", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + WAIT_S
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the live server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=WAIT_S)


def publish_worked_example(url: str, founding: Founding) -> dict[str, str]:
    names: dict[str, str] = {}
    with httpx.Client(base_url=url, timeout=30) as client:
        for doc in founding.authority_documents():
            assert client.post("/api/authority", json=doc).status_code == 201
        for step in CONTRACT["object_examples"]["steps"]:
            content = resolve_refs(step["content"], names)
            now = format_ms(int(time.time() * 1000))
            env = founding.participants[step["actor"]].envelope(founding.genesis, content, now)
            r = client.post("/api/entries", json=env)
            assert r.status_code == 201, r.text
            names[step["name"]] = r.json()["id"]
    return names


def worked_example_library(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb,
                           seed: bytes, extra: Callable[[str, Founding], None] | None = None,
                           ) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    """A module's live library founded from ``seed`` with the worked example published (and
    whatever ``extra`` adds), stopped after the module."""
    founding = found_library(seed=seed, created_at="2026-01-01T00:00:00.000Z")
    founding.enroll("owner")
    founding.enroll("peer")
    server = LiveServer(module_db(tmp_path_factory.mktemp("browser-lib") / "lib.db"), founding)
    try:
        names = publish_worked_example(server.url, founding)
        if extra is not None:
            extra(server.url, founding)
        yield server, names
    finally:
        server.stop()


@contextmanager
def chromium(profile: Path, *arguments: str) -> Iterator[Any]:
    """Headless Chromium through Selenium with its profile in ``profile``, at 1280 px, quit
    on leaving."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                "--disable-dev-shm-usage", "--window-size=1280,1000",
                f"--user-data-dir={profile}", *arguments):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    browser.set_page_load_timeout(WAIT_S)
    try:
        yield browser
    finally:
        browser.quit()


def shot(driver: Any, name: str) -> None:
    """A full-height screenshot at the window's current width, which it keeps."""
    SHOTS.mkdir(exist_ok=True)
    width = int(driver.get_window_size()["width"])
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(int(height), 800), 6000))
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    driver.set_window_size(width, 1000)


def wait(driver: Any, condition: Callable[[Any], Any], what: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S).until(condition, message=what)


def badge_settled(driver: Any) -> Any:
    from selenium.webdriver.common.by import By

    el = driver.find_element(By.ID, "verification")
    state = el.get_attribute("data-state")
    return state if state in ("ok", "differs", "unpinned", "bad", "unavailable") else None


def set_reader_trust(driver: Any, url: str, pin: str = "", witnesses: tuple[str, ...] = (),
                     quorum: str = "") -> str:
    """What a reader does on ``/trust``: type a pin (and witness keys), save; the status line."""
    from selenium.webdriver.common.by import By

    driver.get(url + "/trust")
    wait(driver, lambda d: d.find_element(By.ID, "trust-form").is_displayed(), "the form")
    for field, value in (("trust-pin", pin), ("trust-witnesses", "\n".join(witnesses)),
                         ("trust-quorum", quorum)):
        el = driver.find_element(By.ID, field)
        el.clear()
        if value:
            el.send_keys(value)
    driver.find_element(By.ID, "trust-save").click()
    return str(wait(driver, lambda d: d.find_element(By.ID, "trust-status").text, "saved"))


def forget_reader_trust(driver: Any, url: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(url + "/trust")
    wait(driver, lambda d: d.find_element(By.ID, "trust-form").is_displayed(), "the form")
    driver.find_element(By.ID, "trust-forget").click()
    wait(driver, lambda d: d.find_element(By.ID, "trust-status").text.startswith("Forgotten"),
         "forgotten")


def axe_violations(driver: Any) -> list[dict[str, Any]]:
    """Serious and critical axe-core violations of the current page (WCAG 2 A and AA rules)."""
    driver.execute_script((ASSETS / "axe.min.js").read_text())
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21aa',"
        " 'best-practice']}}).then((r) => done(r.violations), (e) => done(String(e)));"
    )
    assert isinstance(result, list), result
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["html"][:200] for n in v["nodes"]]}
        for v in result if v["impact"] in ("serious", "critical")
    ]
