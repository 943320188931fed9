"""Reading the HTML pages the real app serves: the parsed page and the headers every page
carries."""

from __future__ import annotations

from html.parser import HTMLParser

import httpx

from alexandria.api.web.render import CSP
from tests.support.library import Api


class Page(HTMLParser):
    """The parts of a page the tests look at: elements by tag, attributes, scripts, text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def all(self, tag: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag]

    def hrefs(self) -> list[str]:
        return [str(a["href"]) for a in self.all("a") if a.get("href")]

    @property
    def plain(self) -> str:
        return " ".join(" ".join(self.text).split())


async def get_page(api: Api, path: str, status: int = 200) -> Page:
    r = await api.client.get(path)
    assert r.status_code == status, r.text[:2000]
    assert r.headers["content-type"].startswith("text/html")
    check_headers(r)
    return Page(r.text)


def check_headers(r: httpx.Response) -> None:
    assert r.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "unsafe" not in CSP
    assert r.headers["x-content-type-options"] == "nosniff"
