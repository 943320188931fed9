"""Operating a library: ``backup``, ``restore`` (with ``--catch-up``), ``mirror`` and
``migrate`` (a SQLite library into PostgreSQL, ``store/postgresql/migrate.py``), each on a
SQLite file or a PostgreSQL database (a backup is always a SQLite library file).

docs/operations.md says when to use which; the code that does the work is in
``store/backup.py`` (SQLite's online backup API), ``service/follow.py`` (verify and store
another copy's entries) and ``service/mirror.py`` (the mirror's follower beside its read API).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING

import orjson

from alexandria.api.app import create_app
from alexandria.api.origin import Origin, listen_url
from alexandria.audit.export import http_fetcher
from alexandria.cli.command_table import EXIT_INTERRUPTED
from alexandria.cli.participant import command
from alexandria.cli.progress import ProgressBar
from alexandria.cli.terminal import emit_json, note, say
from alexandria.cli.usage import UsageError
from alexandria.core.trust import Genesis
from alexandria.errors import Malformed
from alexandria.service.follow import Follower, catch_up
from alexandria.service.library import Library, MirrorState, load_genesis
from alexandria.service.mirror import run_mirror
from alexandria.service.published import PublishedCheckpoint, path_for
from alexandria.store import log_floor
from alexandria.store.backends import display, has_library, open_readonly, storage_for
from alexandria.store.backup import backup, describe, restore, stored_genesis
from alexandria.store.postgresql import is_database_url
from alexandria.store.postgresql.migrate import migrate

if TYPE_CHECKING:
    from alexandria.store.log_floor import Published


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = command(sub, "backup", "copy a library's database while it serves", cmd_backup,
                "An online, consistent backup of the library database FILE (a SQLite file, or"
                " a postgresql:// URL) to OUT, a SQLite library file: one snapshot of committed"
                " state; admissions go on meanwhile.", library=False)
    p.add_argument("--db", required=True, metavar="FILE|URL",
                   help="the library's database: a SQLite file or a postgresql:// URL")
    p.add_argument("out", metavar="OUT", help="the backup file to create (must not exist)")

    p = command(sub, "restore", "restore a backup, and catch up with a mirror or an export",
                cmd_restore,
                "Copy BACKUP to the database FILE or postgresql:// URL (stop the server, or"
                " every node, first: the restore refuses while one uses the database), then"
                " with"
                " --catch-up replay, verified, everything admitted after the backup from a"
                " mirror's (or the origin's) URL or an export file. Without BACKUP,"
                " --catch-up catches up FILE in place, also while the server runs. Until the"
                " database holds every leaf of the largest checkpoint the library published"
                " (recorded in the database, carried over by the restore, and in"
                " LOG_KEY.published), the server refuses writes and checkpoints (503"
                " CATCH_UP_REQUIRED); a backup of another history is refused (LOG_FORKED).",
                library=False)
    p.add_argument("backup", nargs="?", metavar="BACKUP", help="a file made by `alexandria"
                   " backup`")
    p.add_argument("--db", required=True, metavar="FILE|URL",
                   help="the library's database: a SQLite file or a postgresql:// URL")
    p.add_argument("--catch-up", metavar="URL|EXPORT",
                   help="replay the missing tail from this mirror/origin URL or export file")
    p.add_argument("--replace", action="store_true",
                   help="replace an existing FILE (of the same library)")
    p.add_argument("--log-key", metavar="FILE",
                   help="the library's log key: check the result against the largest"
                   " checkpoint it published (LOG_KEY.published)")

    p = command(sub, "migrate", "copy a SQLite library into PostgreSQL", cmd_migrate,
                "Copy the SQLite library FILE (stop its server first: migrate refuses while one"
                " uses it), from one snapshot, into the empty PostgreSQL"
                " database URL (any libpq URL, e.g. postgresql:///NAME with PGHOST), then check"
                " that the Merkle root of the copied leaves is the SQLite log's and the latest"
                " checkpoint the same. Then serve it with `alexandria serve --db URL`.",
                library=False)
    p.add_argument("--db", required=True, metavar="FILE", help="the SQLite library")
    p.add_argument("--to", required=True, metavar="URL", help="the PostgreSQL database")

    p = command(sub, "mirror", "serve a verified read-only replica of a library",
                cmd_mirror,
                "Follow the library at URL: verify every entry and checkpoint against the"
                " pinned genesis (as `alexandria verify` does), store them in FILE, and serve"
                " the same read API and the origin's signed checkpoints. Resumes from FILE"
                " after a restart; stops (exit 6) at an entry that does not verify, a"
                " checkpoint inconsistent with one it verified or a page that breaks the"
                " protocol, keeping what it verified. SIGTERM or SIGINT stops it within"
                " seconds (exit 0), keeping what it verified.", library=False)
    p.add_argument("--from", dest="origin", required=True, metavar="URL",
                   help="the origin library")
    p.add_argument("--db", required=True, metavar="FILE|URL",
                   help="the mirror's database: a SQLite file or a postgresql:// URL")
    pin = p.add_mutually_exclusive_group()
    pin.add_argument("--pin", metavar="HEX", help="the origin's genesis pin (first run)")
    pin.add_argument("--genesis", metavar="FILE", help="the origin's genesis document")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--stale-after", type=float, default=30.0, metavar="SECONDS",
                   help="not ready (/healthz 503, with the reason) once the origin has not"
                   " answered for this long (default 30)")


def cmd_migrate(args: argparse.Namespace) -> int:
    if not is_database_url(args.to):
        raise UsageError(f"--to {args.to!r} is not a postgresql:// URL")
    with ProgressBar("migrating", "rows") as bar:
        result = migrate(args.db, args.to, lambda _table, rows, total: bar.update(rows, total))
    if args.json:
        emit_json(result.to_json())
    else:
        say(f"migrated {args.db}: {result.size} log entries ({result.rows:,} rows), root"
            f" {result.root}, latest checkpoint {result.checkpoint}: the same in PostgreSQL")
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    snap = backup(args.db, args.out)
    if args.json:
        emit_json({"path": snap.path, "genesis_pin": snap.genesis_pin, "size": snap.size,
                   "bytes": snap.bytes})
        return 0
    say(snap.path)
    note(f"backed up {display(args.db)}: {snap.size} log entries, {snap.bytes:,} bytes")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    if args.backup is None and args.catch_up is None:
        raise UsageError("give a BACKUP to restore, --catch-up URL|EXPORT, or both")
    result: dict[str, object] = {"db": display(args.db)}
    kept = _key_published(args.log_key)
    if args.backup is not None:
        snap = restore(args.backup, args.db, args.replace, floors=kept)
        result["restored"] = snap.size
        note(f"restored {args.backup} to {display(args.db)}: {snap.size} log entries")
    elif not has_library(args.db):
        raise Malformed(f"{display(args.db)}: no such library database", "NO_DATABASE")
    if args.catch_up is not None:
        before, after, stopped_by = asyncio.run(_catch_up(args.db, args.catch_up))
        result["caught_up"] = after - before
        if stopped_by is not None:
            result["interrupted"] = stopped_by
            note(f"catch-up stopped by {stopped_by}: the {after - before} entries verified"
                 f" and stored from {args.catch_up} are kept ({after} in the log); the same"
                 " command continues from there")
            if args.json:
                emit_json(result)
            return EXIT_INTERRUPTED
        note(f"caught up from {args.catch_up}: {after - before} entries verified and stored"
             f" ({after} in the log)")
    size = describe(args.db).size
    result["size"] = size
    published = _published_state(args.db, kept)
    if published is not None:
        result["published"] = published
    if args.json:
        emit_json(result)
    else:
        say(str(size))
    return 0


def _key_published(log_key: str | None) -> list[Published]:
    """The largest checkpoint the library's log key published (``LOG_KEY.published``)."""
    if log_key is None:
        note("no --log-key: compared with the largest checkpoint the database records only")
        return []
    published = PublishedCheckpoint(path_for(log_key)).load()
    if published is None:
        note(f"{path_for(log_key)} does not exist: this key never published a checkpoint")
        return []
    return [published]


async def _catch_up(db: str, source: str) -> tuple[int, int, str | None]:
    """``(size before, size after, the signal that stopped it or None)``: SIGTERM or SIGINT
    cancels the catch-up (a request to a slow source is aborted); what was verified and
    stored before stays."""
    storage = storage_for(db, Genesis.from_document(stored_genesis(db)))
    await storage.open()
    stack = contextlib.ExitStack()
    try:
        before = await storage.log_size()
        bar = ProgressBar("catching up", "entries", initial=before)
        stack.callback(bar.close)

        def progress(f: Follower) -> None:
            bar.update(f.size, max(f.source_size, f.size))

        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        stopped_by: list[str] = []

        def stop(sig: signal.Signals) -> None:
            stopped_by.append(sig.name)
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop, sig)
        try:
            follower = await catch_up(storage, source, progress)
        except asyncio.CancelledError:
            if not stopped_by:
                raise
            task.uncancel()
            return before, await storage.log_size(), stopped_by[0]
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        return before, follower.size, None
    finally:
        stack.close()
        await storage.close()


def _published_state(db: str, kept: list[Published]) -> int | None:
    """Compare the database with the largest checkpoint the library published (its own record
    and ``LOG_KEY.published``): refuse to call a restore complete that still misses part of it
    (``CATCH_UP_REQUIRED``) or is another history (``LOG_FORKED``)."""
    with open_readonly(db) as conn:
        floors = [*log_floor.read_floor(conn), *kept]
        problem = log_floor.log_problem(conn, floors)
    if isinstance(problem, log_floor.CatchUpRequired):
        size, published = problem.details["tree_size"], problem.details["published_size"]
        raise log_floor.CatchUpRequired(
            f"the database holds {size} leaves but the library published a checkpoint of size"
            f" {published}: until a mirror or an export supplies the missing entries"
            " (`alexandria restore --db FILE --catch-up URL|EXPORT`), the server serves reads"
            " and refuses writes", **problem.details,
        )
    if problem is not None:
        raise problem
    top = log_floor.largest(floors)
    if top is None:
        return None
    note(f"the database extends the largest checkpoint published ({top.size}):"
         " writes and checkpoints resume")
    return top.size


def cmd_mirror(args: argparse.Namespace) -> int:
    origin = args.origin.rstrip("/")
    if args.genesis:
        genesis = load_genesis(args.genesis)
    elif has_library(args.db):
        genesis = Genesis.from_document(stored_genesis(args.db), args.pin)
    elif args.pin:
        fetch, close = http_fetcher(origin)
        try:
            document = orjson.loads(fetch("/api/genesis"))["document"]
        finally:
            close()
        genesis = Genesis.from_document(document, args.pin)  # refuses another pin
    else:
        raise UsageError("a new mirror needs the origin's genesis pin (--pin) or genesis"
                         " document (--genesis): it verifies everything against it")
    if args.pin and genesis.pin != args.pin:
        raise Malformed(f"{display(args.db)} mirrors the library {genesis.pin}, not {args.pin}",
                        "GENESIS_MISMATCH")
    if not 0 < args.stale_after <= 86_400:
        raise UsageError("--stale-after is 0..86400 seconds")
    state = MirrorState(origin, stale_after=args.stale_after)
    library = Library(genesis, storage_for(args.db, genesis), mirror=state)
    say(f"genesis pin {genesis.pin}")
    say(f"mirroring {genesis.library} from {origin} on http://{args.host}:{args.port}")
    app = create_app(library, origin=Origin(listen=listen_url(args.host, args.port)))
    stopped_by = run_mirror(library, app, args.host, args.port)
    if state.failure is not None:
        raise state.failure
    if stopped_by is not None:
        note(f"mirror: stopped by {stopped_by}")
    return 0
