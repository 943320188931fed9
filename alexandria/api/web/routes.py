"""The HTML pages: thin handlers that parse strict parameters, run one read of
``reads/pages.py`` on the reader connection and render a template on the page thread
(``render.rendered``), never on the event loop; one page at a time per process, pages taking at
most a bounded share of its time (``gate.py``).

Routes never shadow the JSON API (``/api/...``): ``/`` (catalogue), ``/objects/{root}``,
``/objects/{root}/compare?from=&to=`` (the diff of two of its revisions),
``/revisions/{revision}``, ``/authors/{actor}``, ``/log``, ``/trust`` (the reader's own pin,
kept in their browser) and ``/static/...``; the three with an id also take a unique prefix of
one (8 or more hex) and redirect to the full id.  A bad parameter or an unknown id is the same
typed error the API gives (PROTOCOL §6), shown as a page with its status code.  An empty form
field is no parameter, since a browser submits every field.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from alexandria.api.catalogue import CATALOGUE_PARAMETERS, MAX_OFFSET, parse_catalogue_query
from alexandria.api.contract import origin_of
from alexandria.api.http import int_param, library_of, not_found, query_params, revision_param
from alexandria.api.web import present
from alexandria.api.web.gate import PageGate
from alexandria.api.web.render import STATIC, error_page, page, rendered
from alexandria.core.keys import HEX64
from alexandria.errors import AlexandriaError, Malformed
from alexandria.reads import lookup, pages
from alexandria.reads.catalogue import PAGE_SIZE, SORTS, VIEWS
from alexandria.store.search_index import LISTED_KINDS

Handler = Callable[[Request], Awaitable[Response]]
HOME_PARAMETERS = ("q", "kind", "view", "sort", "offset")
assert set(HOME_PARAMETERS) <= set(CATALOGUE_PARAMETERS)
SECTION_TITLES = {
    "children": "Children", "knowledge": "Included knowledge", "graph": "Relationships",
    "discussions": "Discussions", "evidence": "Evidence", "assessments": "Assessments",
    "proposals": "Proposals", "related": "Links and citations", "history": "History",
    "thread": "Thread",
}


def html_errors(handler: Handler) -> Handler:
    """Typed errors of a page handler become an error page with the same status and body
    (and ``Retry-After`` when the error says when).  The handler runs in its turn
    (``gate.PageGate``).  With ``serve --server-timing`` every page says how long the server
    spent on it in its turn (``Server-Timing: app;dur=MS``, shown by browsers' developer tools
    and read by ``bench/pages.py``) and how long it waited for its turn (``wait;dur=MS``); not
    by default, since it tells anyone what a request cost."""

    @functools.wraps(handler)
    async def run(request: Request) -> Response:
        arrived = start = time.perf_counter()

        async def in_turn() -> Response:
            nonlocal start
            start = time.perf_counter()
            return await handler(request)

        try:
            response = await _gate(request).run(in_turn)
        except AlexandriaError as exc:
            genesis = library_of(request).genesis
            response = error_page(exc, genesis.library, genesis.pin)
        if request.app.state.server_timing:
            timing = f"app;dur={(time.perf_counter() - start) * 1000:.2f}"
            if start > arrived:
                timing += f", wait;dur={(start - arrived) * 1000:.2f}"
            response.headers["Server-Timing"] = timing
        return response

    return run


def _gate(request: Request) -> PageGate:
    """The app's page gate (one per app, hence per process and event loop)."""
    gate: PageGate | None = getattr(request.app.state, "page_gate", None)
    if gate is None:
        gate = request.app.state.page_gate = PageGate()
    return gate


def form_params(request: Request, allowed: tuple[str, ...]) -> dict[str, str]:
    """Strict query parameters (unknown or repeated: 400), empty ones dropped."""
    return {k: v for k, v in query_params(request, allowed).items() if v != ""}


def _actor(request: Request) -> str:
    value = str(request.path_params["actor"])
    if not HEX64.match(value):
        raise Malformed("an actor is 64 lowercase hex characters", "BAD_ACTOR",
                        parameter="actor", value=value[:100])
    return value


async def _prefix_redirect(request: Request, kinds: tuple[str, ...]) -> Response | None:
    """A page addressed by a unique prefix of a revision id (``/objects/9d272d70``) or an
    actor (``/authors/9f247fca838e``) redirects to the full id, keeping the query; an
    ambiguous one is a 409 page listing the candidates, an unknown one 404.  None when the
    parameter is not a shorter prefix."""
    name = "actor" if "actor" in kinds else "revision"
    value = str(request.path_params[name])
    if HEX64.match(value) or not lookup.is_prefix(value):
        return None
    found = await library_of(request).storage.read(
        lambda conn: lookup.resolve(conn, value, kinds))
    base = request.url.path[: -len(value)]
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"{base}{found.id}{query}", status_code=302)


def _url(path: str, params: dict[str, Any]) -> str:
    query = urlencode({k: v for k, v in params.items() if v not in (None, "", 0)})
    return f"{path}?{query}" if query else path


def _common(request: Request, title: str) -> dict[str, Any]:
    genesis = library_of(request).genesis
    return {"library": genesis.library, "pin": genesis.pin, "title": title}


# --- / : the catalogue -----------------------------------------------------------------------


@html_errors
async def home(request: Request) -> Response:
    params = form_params(request, HOME_PARAMETERS)
    query = parse_catalogue_query(params)
    storage = library_of(request).storage
    candidates: list[dict[str, Any]] = []
    more_candidates = False
    typed = params.get("q", "").strip().lower()
    if lookup.is_prefix(typed):  # an id or a prefix of one: its page, or what it may be
        found_ids, more_candidates = await storage.read(
            lambda conn: lookup.candidates(conn, typed))
        if len({f.id for f in found_ids}) == 1 and not more_candidates:
            return RedirectResponse(found_ids[0].url, status_code=302)
        candidates = [f.to_json() for f in found_ids]
    found = await storage.read(
        lambda conn: pages.catalogue_page(conn, storage, query)
    )

    def build() -> HTMLResponse:
        items = present.revisions(found.items)
        end = query.offset + len(items)
        nav = {k: v for k, v in params.items() if k != "offset"}
        return page(
            "catalogue.html", **_common(request, "Catalogue"),
            items=items, total=found.total, query=query, params=params,
            kinds=LISTED_KINDS, views=tuple(VIEWS), sorts=SORTS,
            empty_library=found.total == 0 and not params, names=found.names,
            base_url=origin_of(request),
            candidates=candidates, more_candidates=more_candidates,
            id_typed=typed if lookup.is_prefix(typed) else None,
            first=query.offset + 1, last=end,
            next_url=_url("/", {**nav, "offset": end}) if end < found.total else None,
            prev_url=(_url("/", {**nav, "offset": max(0, query.offset - PAGE_SIZE)})
                      if query.offset > 0 else None),
        )

    return await rendered(build)


# --- /objects/{revision} ---------------------------------------------------------------------


@html_errors
async def object_page(request: Request) -> Response:
    redirect = await _prefix_redirect(request, ("object", "revision"))
    if redirect is not None:
        return redirect
    rev = revision_param(request)
    params = form_params(request, ("section", "offset"))
    section = params.get("section")
    if section is not None and section not in pages.PAGED_SECTIONS:
        raise Malformed(
            f"section must be one of {', '.join(pages.PAGED_SECTIONS)}", "BAD_PARAMETER",
            parameter="section", allowed=list(pages.PAGED_SECTIONS),
        )
    offset = int_param(params, "offset", 0, 0, MAX_OFFSET)
    storage = library_of(request).storage
    found = await storage.read(
        lambda conn: pages.object_page(conn, storage, rev, section, offset)
    )
    if found is None:
        raise not_found(rev)
    if rev != found.subject.root:  # one address per object: its root
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"/objects/{found.subject.root}{query}", status_code=302)

    def build() -> HTMLResponse:  # parsing, diffs and the template: on the page thread
        item = present.revision(found.item)
        total = found.subject.revisions
        history = present.history(
            present.revisions(found.history.items),
            present.revision(found.before_history) if found.before_history else None,
            total - found.history.offset - len(found.history.items) + 1, found.targets,
        )
        shown = set(found.sections)

        def listed(name: str, items: list[present.Revision]) -> list[present.Revision]:
            # what links to the object and has its own section is not listed twice
            if name != "related":
                return items
            return [r for r in items if not (
                (r.kind == "relationship" and "graph" in shown)
                or (r.kind == "proposal" and "proposals" in shown)
                or (r.kind == "evidence" and "evidence" in shown)
                or (r.kind == "assessment" and "assessments" in shown)
                or (r.kind == "discussion" and "discussions" in shown))]

        sections = {
            name: {
                "title": SECTION_TITLES[name],
                "items": listed(name, present.revisions(s.items)),
                "more": (_url(f"/objects/{rev}", {"section": name, "offset": s.next_offset})
                         if s.next_offset is not None else None),
                "offset": s.offset,
            }
            for name, s in found.sections.items()
        }
        thread = None
        thread_more = None
        if found.thread is not None:
            thread = present.thread(
                found.subject.root, present.revisions(found.thread.items), found.roots,
                pages.THREAD_RELATIONS,
            )
            if found.thread.next_offset is not None:
                thread_more = _url(
                    f"/objects/{rev}", {"section": "thread", "offset": found.thread.next_offset}
                )
        start = found.history.offset
        return page(
            "object.html", **_common(request, item.title),
            item=item, subject=found.subject, ancestors=present.revisions(found.ancestors),
            sections=sections, history=history, history_offset=start,
            history_older=(_url(f"/objects/{rev}", {"section": "history",
                                                    "offset": found.history.next_offset})
                           if found.history.next_offset is not None else None),
            history_newer=(_url(f"/objects/{rev}", {
                "section": "history", "offset": max(0, start - pages.HISTORY_PAGE_SIZE)})
                if start > 0 else None),
            thread=thread, thread_total=found.thread.total if found.thread else 0,
            thread_more=thread_more, safe_url=present.safe_url,
            targets=found.targets, names=found.names,
        )

    return await rendered(build)


# --- /revisions/{revision} -------------------------------------------------------------------


@html_errors
async def revision_page(request: Request) -> Response:
    redirect = await _prefix_redirect(request, ("object", "revision"))
    if redirect is not None:
        return redirect
    rev = revision_param(request)
    query_params(request, ())
    lib = library_of(request)
    storage = lib.storage
    found = await storage.read(lambda conn: pages.revision_page(conn, storage, rev))
    if found is None:
        raise not_found(rev)

    def build() -> HTMLResponse:
        item = present.revision(found.signed)
        worker = item.signed["signature"]["certificate"]
        authority = item.signed["admission"]["authority"]
        return page(
            "revision.html", **_common(request, f"Revision of {item.title}"),
            item=item, head=present.revision(found.head), subject=found.subject,
            worker=worker, authority=authority, genesis=lib.genesis,
            witnesses=lib.cosigning.vkeys, witness_quorum=lib.cosigning.quorum,
            signed_json=present.pretty_json(found.signed),
            safe_url=present.safe_url, targets=found.targets, names=found.names,
        )

    return await rendered(build)


# --- /objects/{revision}/compare -------------------------------------------------------------


@html_errors
async def compare_page(request: Request) -> Response:
    rev = revision_param(request)
    params = form_params(request, ("from", "to"))
    sides = []
    for name in ("from", "to"):
        value = params.get(name)
        if value is None or not HEX64.match(value):
            raise Malformed(f"{name} is a revision id of the object: 64 lowercase hex"
                            " characters", "BAD_REVISION", parameter=name,
                            value=(value or "")[:100])
        sides.append(value)
    old, new = sides
    storage = library_of(request).storage
    try:
        found = await storage.read(
            lambda conn: pages.compare_page(conn, storage, rev, old, new))
    except pages.NotOfObject as exc:
        raise Malformed(f"revision {exc.rev[:12]} is not a revision of this object",
                        "NOT_A_REVISION_OF_OBJECT", object=rev, revision=exc.rev) from None
    if found is None:
        raise not_found(rev)

    def build() -> HTMLResponse:
        a, b = present.revision(found.old), present.revision(found.new)
        head = present.revision(found.head)
        return page(
            "compare.html", **_common(request, f"Compare revisions of {head.title}"),
            old=a, new=b, head=head, subject=found.subject,
            diff=present.diff(a, b, found.targets), delta=b.size - a.size,
            targets=found.targets, names=found.names,
        )

    return await rendered(build)


# --- /authors/{actor} ------------------------------------------------------------------------


@html_errors
async def author_page(request: Request) -> Response:
    redirect = await _prefix_redirect(request, ("actor",))
    if redirect is not None:
        return redirect
    actor = _actor(request)
    offset = int_param(form_params(request, ("offset",)), "offset", 0, 0, MAX_OFFSET)
    storage = library_of(request).storage
    found = await storage.read(lambda conn: pages.author_page(conn, storage, actor, offset))

    def build() -> HTMLResponse:
        items = present.revisions(found.contributions)
        end = offset + len(items)
        return page(
            "author.html", **_common(request, f"Author {found.names.get(actor, actor[:12])}"),
            actor=actor, name=found.names.get(actor), names=found.names, items=items,
            total=found.total, offset=offset,
            scores=found.scores,
            next_url=_url(f"/authors/{actor}", {"offset": end}) if end < found.total else None,
        )

    return await rendered(build)


# --- /log ------------------------------------------------------------------------------------


LOG_PARAMETERS = ("before", "after", "entry")


@html_errors
async def log_page(request: Request) -> Response:
    params = form_params(request, LOG_PARAMETERS)
    if len(params) > 1:
        raise Malformed("give one of before, after and entry", "BAD_PARAMETER",
                        parameters=sorted(params))

    def number(name: str, lo: int) -> int | None:
        return int_param(params, name, lo, lo, 2**53 - 1) if name in params else None

    before, after, entry = number("before", 1), number("after", 0), number("entry", 1)
    found = await library_of(request).storage.read(
        lambda conn: pages.log_page(conn, before, after, entry))

    def build() -> HTMLResponse:
        entries = present.log_entries(found.entries)
        first = entries[-1].sequence if entries else 0
        last = entries[0].sequence if entries else 0
        return page(
            "log.html", **_common(request, "Log"), size=found.size,
            checkpoint=found.checkpoint, entries=entries, first=first, last=last,
            target=entry,
            newer_url=_url("/log", {"after": last}) if 0 < last < found.size else None,
            older_url=_url("/log", {"before": first}) if first > 1 else None,
            newest_url="/log" if 0 < last < found.size else None,
            oldest_url="/log?after=0" if first > 1 else None,
        )

    return await rendered(build)


# --- /trust ----------------------------------------------------------------------------------


@html_errors
async def trust_page(request: Request) -> Response:
    """The reader's own pin and witnesses: a form whose script keeps them in the browser."""
    query_params(request, ())
    lib = library_of(request)
    return await rendered(lambda: page(
        "trust.html", **_common(request, "Your pin and witnesses"),
        witnesses=lib.cosigning.vkeys, witness_quorum=lib.cosigning.quorum,
    ))


routes = [
    Route("/", home, methods=["GET"]),
    Route("/objects/{revision}", object_page, methods=["GET"]),
    Route("/objects/{revision}/compare", compare_page, methods=["GET"]),
    Route("/revisions/{revision}", revision_page, methods=["GET"]),
    Route("/authors/{actor}", author_page, methods=["GET"]),
    Route("/log", log_page, methods=["GET"]),
    Route("/trust", trust_page, methods=["GET"]),
    Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
]
