"""Publishing: ``publish FILE…|-|--jsonl FILE`` and ``revise REV``.

One content: checked as the library would check it, signed, written to pending/ and sent
(``pending.py`` states the rule).  Many (files, or JSON Lines): ``Batch`` signs them in order,
makes a chunk durable at once and sends it over kept-alive connections, recording each name as
soon as its content is admitted.  ``revise`` turns the current head of an object into a file to
edit and publishes it with ``previous`` set.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from alexandria.cli.command_table import EXIT_PENDING, EXIT_REFUSED
from alexandria.cli.config import Home
from alexandria.cli.duplicates import DuplicateIndex
from alexandria.cli.participant import (
    command,
    names_file_option,
    names_options,
    session_of,
)
from alexandria.cli.pending import BATCH_BYTES, BATCH_LINES, KeptPending, Outbox, Outcome, Pending
from alexandria.cli.progress import ProgressBar
from alexandria.cli.session import (
    ContentRefused,
    Session,
    body_of,
    check_signed_record,
    parse_content,
    parse_document,
    parse_refs,
    read_input,
)
from alexandria.cli.terminal import (
    debug,
    emit_json,
    emit_raw,
    lines_together,
    note,
    one_line,
    safe_json,
    say,
    say_lines,
    short,
)
from alexandria.cli.usage import UsageError
from alexandria.errors import AlexandriaError, Malformed
from alexandria.files import check_name
from alexandria.rules.state import IMMUTABLE, proposal_route

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: Sub) -> None:
    p = command(sub, "publish", "sign content and publish it", cmd_publish,
                "Sign content ({kind,title,body,links,previous} as the write contract's"
                " content_schema describes it), check it as the library would, and publish it."
                " Each signed envelope is written to pending/ first; when the library cannot be"
                " reached it stays there for `alexandria retry`. Many files, or --jsonl (one"
                " content per line, optionally with a \"name\" field), go over one connection;"
                " each $name resolves to what an earlier line published.",
                examples="  alexandria publish claim.json --name claim\n"
                "  alexandria publish a.json b.json c.json\n"
                "  alexandria publish --jsonl contributions.jsonl\n"
                "  echo '{\"kind\": \"reply\", …}' | alexandria publish -")
    p.add_argument("files", metavar="FILE", nargs="*", help="content file(s), or - for stdin")
    p.add_argument("--jsonl", metavar="FILE",
                   help="one content per line (- for stdin); a \"name\" field records its id")
    p.add_argument("--name", help="record the published id under NAME in the names file"
                   " (one FILE)")
    duplicate_option(p)
    names_options(p)

    p = command(sub, "revise", "edit the current head of an object and publish the revision",
                cmd_revise,
                "Fetch the current head of REV's object (checked against the pinned genesis),"
                " open its content in $VISUAL / $EDITOR, and publish what you saved with"
                " `previous` set to that head. With --print, write the editable content to"
                " stdout instead: edit it and `alexandria publish` it yourself.",
                examples="  alexandria revise claim\n"
                "  alexandria revise claim --print > claim.json && $EDITOR claim.json"
                " && alexandria publish claim.json")
    p.add_argument("revision", metavar="REV", help="revision id or a name of the object")
    p.add_argument("--print", action="store_true", dest="print_only",
                   help="print the editable content instead of opening an editor")
    p.add_argument("--name", help="record the new revision under NAME in the names file")
    duplicate_option(p)
    names_file_option(p)


def duplicate_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-duplicate", action="store_true",
                   help="publish even when this home already published, or holds pending,"
                   " the same kind, title, body, links and previous (refused by default:"
                   " DUPLICATE_CONTRIBUTION)")


def _duplicates(args: argparse.Namespace, session: Session) -> DuplicateIndex | None:
    return None if args.allow_duplicate else DuplicateIndex(session.home)


def _warn_rebind(session: Session, name: str, rev: str) -> None:
    """``--name`` that already names another revision is rebound: say from what to what."""
    old = session.names().get(name)
    if old is not None and old != rev:
        note(f"warning: --name {name} named {old}; it now names {rev}")


@dataclass(frozen=True)
class Item:
    """One content to publish: where it came from (for messages) and the name to record; or
    why it could not be read (a batch reports that line and goes on)."""

    source: str
    content: dict[str, Any]
    name: str | None
    error: AlexandriaError | None = None


def _items(args: argparse.Namespace) -> Iterator[Item]:
    """The contents of ``publish``, in order, read lazily (a 10,000-line file is not held)."""
    if args.jsonl is not None:
        if args.files or args.name:
            raise UsageError("--jsonl takes no FILE and no --name (put \"name\" in each line)")
        stream = sys.stdin.buffer if args.jsonl == "-" else _open(args.jsonl)
        with stream:
            for number, line in enumerate(stream, 1):
                if not line.strip():
                    continue
                source = f"{args.jsonl}:{number}"
                try:
                    value = parse_document(line, source)
                    name = value.pop("name", None) if isinstance(value, dict) else None
                    if name is not None and not isinstance(name, str):
                        raise Malformed(f"{source}: \"name\" is a string", "BAD_NAME")
                    content = parse_content(orjson.dumps(value), source)
                    yield Item(source, content, check_name(name) if name is not None else None)
                except AlexandriaError as exc:
                    yield Item(source, {}, None, exc)
        return
    if not args.files:
        raise UsageError("give FILE (- for stdin), several FILEs, or --jsonl FILE")
    if args.name is not None and len(args.files) != 1:
        raise UsageError("--name goes with one FILE (in --jsonl, a \"name\" field per line)")
    for source in args.files:
        try:
            yield Item(source, parse_content(read_input(source), source), args.name)
        except AlexandriaError as exc:
            yield Item(source, {}, None, exc)


def _count(args: argparse.Namespace) -> int | None:
    """How many contents ``publish`` has to go through, for its progress bar: the files, or
    the lines of a ``--jsonl`` file (counted in one quick pass); None for stdin."""
    if args.jsonl is None:
        return len(args.files)
    if args.jsonl == "-" or not Path(args.jsonl).is_file():
        return None
    with _open(args.jsonl) as stream:
        return sum(1 for line in stream if line.strip())


def _open(path: str) -> Any:
    try:
        return open(path, "rb")
    except OSError as exc:
        raise Malformed(f"cannot read {path}: {exc.strerror}", "CANNOT_READ", path=path) from exc


def cmd_publish(args: argparse.Namespace) -> int:
    if args.name is not None:
        check_name(args.name)
    session = session_of(args)
    try:
        if args.jsonl is not None or len(args.files) > 1:
            batch = Batch(args, session)
            try:
                batch.run(_items(args))
                batch.finish()
            finally:
                batch.close()
            return batch.summary()
        [item] = list(_items(args))
        if item.error is not None:
            raise item.error
        outcome = _publish_one(session, Outbox(session.home), item, parse_refs(args.ref),
                               _duplicates(args, session))
    finally:
        session.close()
    return _report_publish(args, outcome, session.home)


#: envelopes made durable in pending/ together, then sent in one ``POST /api/entries/batch``
#: (PROTOCOL §4.1: at most 1,000 lines and 8 MiB a request): the first chunk is small, so that
#: the library starts admitting soon, and each next one twice the one before, up to the limit
#: (each request's start and end leave the library idle for a moment: fewer, larger requests)
FIRST_CHUNK = min(64, BATCH_LINES)
CHUNK = BATCH_LINES
CHUNK_BYTES = BATCH_BYTES


def chunk_sizes() -> Iterator[int]:
    """The lines of each chunk a batch sends, in order (fewer where the bytes reach
    ``CHUNK_BYTES`` first, or the input ends)."""
    size = FIRST_CHUNK
    while True:
        yield size
        size = min(2 * size, CHUNK)


class Batch:
    """``publish FILE…`` / ``--jsonl``: every content is checked and signed, written to
    pending/ a chunk at a time, sent in one batch request (its lines admitted in order, each
    as ``POST /api/entries`` would admit it), and its name recorded as soon as it is admitted.
    Chunks move through four threads at once: one is signed (this thread), the one before it
    made durable in pending/ (the pending thread), the one before that in flight (the sender
    thread), and an admitted chunk's signed records are made durable in published/ (the
    published thread) while the next is sent.  A chunk is sent only once it is durable, and
    its answers are reported (in order) before the next is sent.  A content that uses a name
    defined in a chunk not answered yet waits for that chunk, so ``$name`` always resolves to
    an admitted revision.
    A refusal (before signing) or a rejection (by the library) is reported and the rest go on;
    when the library cannot be reached the batch stops, what was signed stays pending for
    ``alexandria retry`` and what is not signed yet is not published."""

    def __init__(self, args: argparse.Namespace, session: Session) -> None:
        self.args = args
        self.session = session
        self.outbox = Outbox(session.home)
        self.refs = parse_refs(args.ref)
        self.duplicates = _duplicates(args, session)
        self.chunk: list[tuple[Item, Any, dict[str, Any]]] = []
        self.chunk_bytes = 0
        self.chunk_signed = 0
        self.sizes = chunk_sizes()
        self.chunk_limit = next(self.sizes)
        self.chunk_names: set[str] = set()
        self.results: list[dict[str, Any]] = []
        self.stopped = False
        #: the chunk sent and not answered yet, its names, and the answers to come
        self.in_flight: tuple[list[tuple[Item, Any, dict[str, Any]]], Any] | None = None
        self.in_flight_names: set[str] = set()
        self._sender: Any = None
        #: the thread that makes chunks durable in pending/, and the failure that stops it
        self._files: Any = None
        #: the thread that records admitted chunks (published/, names, pending/ cleared)
        self._settler: Any = None
        self._write_failed: BaseException | None = None
        self._settling: list[Future[None]] = []
        self.bar = ProgressBar("publishing", "contributions", _count(args))

    def run(self, items: Iterator[Item]) -> None:
        for item in items:
            if item.error is not None:  # unreadable: reported in its place
                self.chunk.append((item, None, {"refused": item.error}))
                continue
            if _names_used(item.content) & (self.chunk_names | self.in_flight_names):
                self.flush()
                self.collect()
            if self.done():
                return
            try:
                content = self.session.resolve(item.content, self.refs)
                signed = self.session.sign(content)
                if self.duplicates is not None:
                    duplicate = self.duplicates.refusal(signed.record)
                    if duplicate is not None:
                        raise duplicate
                    self.duplicates.add(signed.id, signed.record)
            except AlexandriaError as exc:  # reported in its place, after what comes before it
                self.chunk.append((item, None, {"refused": exc}))
                continue
            meta: dict[str, Any] = {"kind": content["kind"], "title": content["title"]}
            if item.name is not None:
                meta["name"] = item.name
                if self.session.names_path is not None:
                    meta["names_file"] = str(self.session.names_path)
            if self.chunk_bytes + len(signed.envelope) + 1 > CHUNK_BYTES:
                self.flush()
                if self.done():
                    return
            if item.name is not None:
                self.chunk_names.add(item.name)
            self.chunk.append((item, signed, meta))
            self.chunk_bytes += len(signed.envelope) + 1
            self.chunk_signed += 1
            if self.chunk_signed >= self.chunk_limit:
                self.flush()
            if self.done():
                return
        self.flush()
        self.collect()

    def done(self) -> bool:
        return self.stopped

    def flush(self) -> None:
        """The chunk durable in pending/; then, once the chunk in flight is answered (and
        reported), sent in one batch request on the session's kept-alive connection, from a
        sender thread: the library admits its lines in order in one group commit."""
        if not self.chunk:
            return
        chunk, names = self.chunk, self.chunk_names
        self.chunk, self.chunk_names = [], set()
        self.chunk_bytes = self.chunk_signed = 0
        self.chunk_limit = next(self.sizes)
        if self._sender is None:
            self._sender = ThreadPoolExecutor(1, thread_name_prefix="alexandria-publish")
            self._files = ThreadPoolExecutor(1, thread_name_prefix="alexandria-pending")
            self._settler = ThreadPoolExecutor(1, thread_name_prefix="alexandria-published")
        # durable while the chunk before it is in flight
        written = self._files.submit(self._write, [(s.id, s.envelope, m) for _i, s, m in chunk
                                                   if s is not None])
        self.collect()
        if self.stopped:  # never sent: its envelopes stay pending, in files of their own
            kept = [Outcome(p, "kept") for p in written.result()]
            self.outbox.settle([], kept)
            self._report(chunk, kept)
            return
        self.in_flight = (chunk, self._sender.submit(self._send_written, written))
        self.in_flight_names = names

    def _write(self, items: list[tuple[str, bytes, dict[str, Any]]]) -> list[Pending]:
        """The chunk durable in pending/ (the file thread); after a failure, no later chunk is
        written: the failure is raised again for each."""
        if self._write_failed is not None:
            raise self._write_failed
        try:
            return self.outbox.write_many(items)
        except BaseException as exc:
            self._write_failed = exc
            raise

    def _send_written(self, written: Future[list[Pending]]) -> list[Outcome]:
        pendings = written.result()  # nothing is sent before it is durable
        return self._send(pendings) if pendings else []

    def _send(self, pendings: list[Pending]) -> list[Outcome]:
        admitted: list[tuple[Pending, bytes, dict[str, Any]]] = []
        answered: list[Outcome] | None = None
        try:
            answered = self.outbox.deliver_many(pendings, self.session.client, admitted)
            return answered
        finally:
            # the signed records made durable in published/ on their own thread, while the
            # next chunk is written to pending/ and sent (what is not settled yet is still
            # pending: a retry's 200); the chunk file goes once every line is answered
            self._settling.append(self._settler.submit(self.outbox.settle, admitted, answered))

    def _check_settled(self, wait: bool) -> None:
        """Raise the failure of a chunk's settling (``wait``: once all have ended)."""
        settling = list(self._settling)
        for fut in settling:
            if wait or fut.done():
                self._settling.remove(fut)
                fut.result()

    def finish(self) -> None:
        """Once ``run`` returned: every admitted chunk settled, or its failure raised."""
        self._check_settled(wait=True)

    def collect(self) -> None:
        """Wait for the chunk in flight and report its lines."""
        if self.in_flight is None:
            return
        chunk, answers = self.in_flight
        self.in_flight, self.in_flight_names = None, set()
        outcomes: list[Outcome] = answers.result()
        self._check_settled(wait=False)
        self.stopped = self.stopped or any(o.status == "kept" for o in outcomes)
        self._report(chunk, outcomes)

    def _report(self, chunk: list[tuple[Item, Any, dict[str, Any]]],
                outcomes: list[Outcome]) -> None:
        with self.bar.paused(), lines_together():
            self._report_lines(chunk, outcomes)
        self.bar.update(len(self.results))

    def _report_lines(self, chunk: list[tuple[Item, Any, dict[str, Any]]],
                      outcomes: list[Outcome]) -> None:
        sent = iter(outcomes)
        for item, signed, meta in chunk:
            if signed is None:
                self.results.append(_batch_line(self.args, item.source, None, meta["refused"]))
                continue
            outcome = next(sent)
            if outcome.status == "admitted" and item.name is not None:
                _warn_rebind(self.session, item.name, outcome.pending.id)
                self.session.remember(item.name, outcome.pending.id)
            self.results.append(_batch_line(self.args, item.source, outcome, outcome.error))
        if any(o.status == "kept" for o in outcomes):
            note("the library cannot be reached: what is signed stays in pending/ for"
                 " `alexandria retry`; the rest is not signed")

    def close(self) -> None:
        """Stop the sender thread (after the chunk in flight, whose answers are recorded)."""
        if self._sender is not None:
            self._sender.shutdown(wait=True)
            self._files.shutdown(wait=True)
            self._settler.shutdown(wait=True)
        self.outbox.keep()  # a chunk whose answers did not all come: files of their own
        self.bar.close()

    def summary(self) -> int:
        return _batch_summary(self.results, self.session.home)


def _names_used(content: dict[str, Any]) -> set[str]:
    """The ``$name`` references of a content (``$$`` escapes a literal dollar)."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            if value.startswith("$") and not value.startswith("$$"):
                found.add(value[1:])
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(content)
    return found


def _publish_one(session: Session, outbox: Outbox, item: Item, refs: dict[str, str],
                 duplicates: DuplicateIndex | None) -> Outcome:
    """Resolve, check, sign, refuse a duplicate (unless ``duplicates`` is ``None``), write to
    pending/, send; the name is known to the next item as soon as this one is admitted."""
    content = session.resolve(item.content, refs)
    signed = session.sign(content)
    debug(f"checked and signed {signed.id}")
    if duplicates is not None:
        duplicate = duplicates.refusal(signed.record)
        if duplicate is not None:
            raise duplicate
    meta: dict[str, Any] = {"kind": content["kind"], "title": content["title"],
                            "library": session.library.url}
    if item.name is not None:
        meta["name"] = item.name
        if session.names_path is not None:
            meta["names_file"] = str(session.names_path)
    pending = outbox.write(signed.id, signed.envelope, meta)
    debug(f"written to {session.home.pending_dir}/ (durable)")
    outcome = outbox.deliver(pending, session.client)
    debug(f"{outcome.status}; recorded")
    if outcome.status == "admitted" and item.name is not None:
        _warn_rebind(session, item.name, signed.id)
        session.remember(item.name, signed.id)
    return outcome


def _batch_line(args: argparse.Namespace, source: str, outcome: Outcome | None,
                error: AlexandriaError | None) -> dict[str, Any]:
    """One line per content: the id when admitted (stdout), else why not (stderr)."""
    entry: dict[str, Any] = {"source": source}
    if outcome is not None:
        entry["id"] = outcome.pending.id
        entry["status"] = outcome.status
        if outcome.status == "admitted":
            entry["created"] = outcome.created
    else:
        entry["status"] = "refused"
    if error is None and entry["status"] == "kept":
        note(f"{source}: kept pending (not sent): {entry['id']}")
    if error is not None:
        entry["error"] = error.to_json()
    if args.json:
        emit_json(entry)
    elif entry["status"] == "admitted":
        say(entry["id"])
    elif error is not None:
        note(f"{source}: {entry['status']}: {error.message} [{error.code}]")
    return entry


def _batch_summary(results: list[dict[str, Any]], _home: Home) -> int:
    counts = {s: sum(1 for r in results if r["status"] == s)
              for s in ("admitted", "kept", "rejected", "refused")}
    note(f"{counts['admitted']} admitted, {counts['rejected']} rejected by the library,"
         f" {counts['refused']} refused before signing, {counts['kept']} kept pending")
    if counts["kept"]:
        return EXIT_PENDING
    if counts["rejected"] or counts["refused"]:
        return EXIT_REFUSED
    return 0


def _report_publish(args: argparse.Namespace, outcome: Outcome, home: Home) -> int:
    p = outcome.pending
    if outcome.status == "kept":
        assert outcome.error is not None
        raise KeptPending(
            f"{outcome.error.message} — the signed envelope is kept in"
            f" {home.pending_dir / (p.id + '.json')}: `alexandria retry` resends it",
            outcome.error.code, pending=p.id, **outcome.error.details,
        )
    if outcome.status == "rejected":
        assert outcome.error is not None
        raise _rejected(outcome.error, p, home)
    if args.json:
        emit_raw(outcome.signed)
        return 0
    signed = orjson.loads(outcome.signed)
    say(p.id)
    verb = "admitted" if outcome.created else "already admitted"
    name = f" as ${p.meta['name']}" if "name" in p.meta else ""
    note(f"{verb} {signed['record']['kind']} “{one_line(signed['record']['title'], 60)}”"
         f" as entry {signed['admission']['sequence']}{name}")
    return 0


def _rejected(exc: AlexandriaError, p: Pending, home: Home) -> AlexandriaError:
    fix = "" if "next" in exc.details else "; correct the content and publish anew"
    exc.message = (f"rejected: {exc.message} — recorded in {home.rejected_dir / (p.id + '.json')}"
                   f" and never resent{fix}")
    root = exc.details.get("root")
    if isinstance(root, str):  # a conflict: name the object as the user knows it
        names_file = p.meta.get("names_file")
        with contextlib.suppress(AlexandriaError, OSError):
            names = home.names(Path(names_file) if isinstance(names_file, str) else None)
            name = next((n for n, rev in names.items() if rev == root), None)
            if name is not None:  # a client-side hint: --json prints the library's document
                exc.details["revise_as"] = name
    return exc


# --- revise -----------------------------------------------------------------------------------


def editable_content(record: dict[str, Any], head: str) -> dict[str, Any]:
    """The content of a head, as a file to edit and publish: the body decoded, ``previous``
    set to the head."""
    return {"kind": record["kind"], "title": record["title"], "body": body_of(record),
            "links": record["links"], "previous": head}


def cmd_revise(args: argparse.Namespace) -> int:
    if args.name is not None:
        check_name(args.name)
    editor = None if args.print_only else _editor()
    session = session_of(args)
    try:
        rev = session.revision(args.revision)
        answer = session.client.entry(rev, head=True)
        signed = orjson.loads(answer.content)
        check_signed_record(signed, session.genesis())
        head = signed["id"]
        content = editable_content(signed["record"], head)
        text = orjson.dumps(content, option=orjson.OPT_INDENT_2).decode() + "\n"
        if args.print_only:
            say_lines(safe_json(text.rstrip("\n")))
            return 0
        assert editor is not None
        _check_revisable(session, signed["record"], head)
        if rev != head:
            note(f"{short(rev)} is not the current head of its object: editing the head {head}")
        edited = _edit(editor, text, head)
        if edited is None:
            note("nothing changed: nothing published")
            return 0
        source = f"revision of {short(head)}"
        item = Item(source, parse_content(edited.encode(), source), args.name)
        outcome = _publish_one(session, Outbox(session.home), item, {},
                               _duplicates(args, session))
    finally:
        session.close()
    return _report_publish(args, outcome, session.home)


def _editor() -> str:
    """``$VISUAL``, else ``$EDITOR`` (a command, which may be a script), else ``vi`` — which
    needs a terminal: without one, the content must come another way."""
    chosen = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if chosen:
        return chosen
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(
            "revise opens an editor, and without $VISUAL or $EDITOR that is vi, which needs a"
            " terminal: pass the content another way — `alexandria revise REV --print >"
            " FILE`, edit FILE, then `alexandria publish FILE` (or set $EDITOR to a command)",
            "EDITOR_NEEDS_TERMINAL", next="alexandria revise REV --print",
        )
    return "vi"


def _check_revisable(session: Session, record: dict[str, Any], head: str) -> None:
    """What the library would refuse of any revision of this head, checked before the editor
    opens: an immutable kind, or an object another actor authored."""
    kind = record["kind"]
    if kind in IMMUTABLE:
        raise ContentRefused(
            f"a {kind} is immutable: publish a new {kind} instead of revising {short(head)}",
            "IMMUTABLE", kind=kind,
        )
    actor = session.certificate().actor
    if record["author"] != actor:
        route = proposal_route(kind, head)
        raise ContentRefused(
            f"only the original author ({record['author']}) revises this {kind}; you are"
            f" {actor}. {route['message']}", "NOT_ORIGINAL_AUTHOR", author=record["author"],
            actor=actor, **{k: v for k, v in route.items() if k != "message"},
        )


def _edit(editor: str, text: str, head: str) -> str | None:
    """``text`` after the user's ``editor``; ``None`` when it was saved unchanged.  The
    temporary file is removed whatever happens: when the editor fails nothing is published
    and nothing is left behind."""
    fd, path = tempfile.mkstemp(prefix=f"alexandria-revise-{head[:12]}-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        try:
            status = subprocess.call([*shlex.split(editor), path])
        except (OSError, ValueError) as exc:
            raise Malformed(f"cannot run the editor ({editor}): {exc}; nothing was published",
                            "EDITOR_FAILED", editor=editor) from exc
        if status != 0:
            raise Malformed(f"the editor ({editor}) exited with status {status}; nothing was"
                            " published", "EDITOR_FAILED", editor=editor, status=status)
        edited = Path(path).read_text()
    finally:
        Path(path).unlink(missing_ok=True)
    return None if edited.strip() == text.strip() else edited
