"""Log commands: ``export`` and ``verify`` (docs/log.md).

``alexandria export [--db FILE | --library URL] [--output FILE]`` writes every leaf and every
checkpoint as JSON Lines.  ``alexandria verify [--genesis-pin PIN] [EXPORT | --library URL]``
checks an export (``-`` reads stdin) or a live server's log offline, and ``--entry REV`` checks
one revision against a signed checkpoint with inclusion proofs.  Without ``--library`` (or
``$ALEXANDRIA_LIBRARY``) both use the library of the config home, and ``verify`` without
``--genesis-pin`` its pin; ``--url`` is kept as a hidden alias of ``--library``.  Exit status 0
only when everything holds; otherwise the first failure, named by sequence and reason, on
stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING

import orjson

from alexandria.audit import export, verify
from alexandria.cli.config import Home
from alexandria.cli.progress import ProgressBar
from alexandria.cli.terminal import json_line, warn_plain_http
from alexandria.cli.usage import UsageError
from alexandria.client import check_library_url
from alexandria.core.keys import HEX64
from alexandria.core.witness_policy import WitnessPolicy, policy_of
from alexandria.errors import Malformed
from alexandria.files import atomic_stream
from alexandria.reads import export as db_export

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]

JSON_HELP = "machine-readable output (and typed errors) on stdout"


def _json_wanted(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def _bar(what: str, args: argparse.Namespace) -> ProgressBar:
    """The progress of ``what``: ``--progress`` a bar, ``--no-progress`` none, by default a
    bar on a terminal and plain lines elsewhere (``cli/progress.py``)."""
    return ProgressBar(what, "entries", bar=args.progress)


def register(sub: Sub) -> None:
    p = sub.add_parser(
        "export", help="write every leaf and every checkpoint of a log as JSON Lines",
        description="Write the log's export (docs/log.md): a header, every leaf in order and"
        " every signed checkpoint right after the leaf it ends at. From a live server (--url:"
        " up to the checkpoint it serves) or directly from a database (--db: a SQLite"
        " file or a postgresql:// URL; every leaf admitted when the export starts).",
    )
    p.add_argument("--db", metavar="FILE|URL",
                   help="the library's database: a SQLite file or a postgresql:// URL")
    _library_options(p, "a running library (default: $ALEXANDRIA_LIBRARY, else the one in"
                     " your config home)")
    p.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar on stderr (default: on a terminal; elsewhere a line every"
                   " few seconds; --no-progress: none)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
    p.set_defaults(func=cmd_export)

    v = sub.add_parser(
        "verify", help="verify a log export (or a server's log, or one entry) offline",
        description="Verify with nothing but the pinned genesis: every signature and"
        " certificate chain, the Merkle root, every checkpoint's signature and consistency, and"
        " every state rule replayed from an empty ledger. With --entry, check one revision"
        " against a signed checkpoint with inclusion proofs. Exit 0 only when all of it holds.",
    )
    v.add_argument("--genesis-pin", metavar="PIN",
                   help="SHA-256 of the genesis payload, obtained out of band (default: the pin"
                   " in your config home, for its library)")
    v.add_argument("export", nargs="?", metavar="EXPORT", help="export file, or - for stdin")
    _library_options(v, "verify a running library's log (default, without EXPORT:"
                     " $ALEXANDRIA_LIBRARY, else the one in your config home)")
    v.add_argument("--entry", metavar="REV", help="check only this revision (an id, or a name"
                   " from the names file)")
    v.add_argument("--names", metavar="FILE",
                   help="names file to resolve --entry from (default: the one in your config"
                   " home)")
    v.add_argument("--checkpoint", metavar="FILE",
                   help="with --entry: a signed checkpoint to check against (default: the"
                   " server's current one)")
    v.add_argument("--workers", type=int, default=0, metavar="N",
                   help="threads for the stateless checks ahead of the replay (default 0: every"
                   " check on one thread, the fastest measured: docs/log.md)")
    v.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar on stderr (default: on a terminal; elsewhere a line every"
                   " few seconds; --no-progress: none)")
    v.add_argument("--allow-uncovered", action="store_true",
                   help="accept entries after the last checkpoint (or an export with no"
                   " checkpoint): their signatures and rules are checked, but nothing signed"
                   " says the export is complete (default: refuse, NOT_COVERED)")
    v.add_argument("--witness", action="append", default=[], metavar="NAME=VKEY",
                   help="a trusted witness: its name and cosignature/v1 verifier key"
                   " (repeatable); the checkpoint checked must carry the quorum of valid"
                   " cosignatures")
    v.add_argument("--witness-quorum", type=int, default=None, metavar="N",
                   help="how many trusted witnesses must have cosigned (default: all given)")
    v.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
    v.set_defaults(func=cmd_verify)


def _library_options(p: argparse.ArgumentParser, help_text: str) -> None:
    """``--library URL`` (also accepted before the command), and ``--url`` as a hidden alias."""
    p.add_argument("--library", dest="global_library", metavar="URL", default=argparse.SUPPRESS,
                   help=help_text)
    p.add_argument("--url", dest="global_library", default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)


def _chosen_library(args: argparse.Namespace) -> str | None:
    """``--library URL`` (or ``--url``), else ``$ALEXANDRIA_LIBRARY``, checked and normalised."""
    chosen = getattr(args, "global_library", None) or os.environ.get("ALEXANDRIA_LIBRARY")
    return check_library_url(chosen) if chosen else None


def _home_library() -> tuple[str, str] | None:
    """The config home's library and pin, when one is configured."""
    known = Home.locate().library_or_none()
    return (known.url, known.pin) if known and known.pin else None


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    yield from stream


def cmd_export(args: argparse.Namespace) -> int:
    url = _chosen_library(args)
    if args.db and url and getattr(args, "global_library", None):
        raise UsageError("give --db FILE or --library URL (one of them)")
    if not args.db and not url:
        home = _home_library()
        if home is None:
            raise UsageError("which log? give --db FILE or --library URL (no library is"
                             " configured in your config home)")
        url = home[0]
    bar = _bar("exporting", args)
    with ExitStack() as stack:
        stack.callback(bar.close)
        if args.db:
            lines = db_export.iter_db(args.db)
        else:
            assert url is not None
            warn_plain_http(url)
            fetch, close = export.http_fetcher(url)
            stack.callback(close)
            lines = export.iter_server(fetch)
        if args.output:
            with atomic_stream(Path(args.output)) as out:
                count = _write(lines, out, bar)
        else:
            count = _write(lines, sys.stdout.buffer, bar)
    if _json_wanted(args) and args.output:
        sys.stdout.buffer.write(orjson.dumps({"output": args.output, "lines": count}) + b"\n")
    elif args.output:
        print(f"wrote {count:,} lines to {args.output}", file=sys.stderr)
    return 0


def _write(lines: Iterator[bytes], out: IO[bytes], bar: ProgressBar | None = None) -> int:
    """Every line to ``out`` (to a terminal, with control characters escaped: ``json_line``);
    the bar counts leaves against the header's ``size``."""
    count = leaves = total = 0
    tty = out.isatty()
    for line in lines:
        out.write(json_line(line) if tty else line)
        count += 1
        if bar is None or bar.mode == "off":
            continue
        if count == 1:
            try:
                total = int(orjson.loads(line).get("size", 0))
            except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                total = 0
        elif not line.startswith(b'{"checkpoint"'):
            leaves += 1
            bar.update(leaves, max(total, leaves))
    out.flush()
    return count


def cmd_verify(args: argparse.Namespace) -> int:
    _verify_source(args)
    if args.checkpoint and not args.entry:
        raise UsageError("--checkpoint goes with --entry")
    policy = _witness_policy(args)
    if args.entry:
        return _verify_entry(args, policy)
    bar = _bar("verifying", args)
    with ExitStack() as stack:
        stack.callback(bar.close)
        if args.url:
            warn_plain_http(args.url)
            fetch, close = export.http_fetcher(args.url)
            stack.callback(close)
            source: Iterator[bytes] = export.iter_server(fetch)
        elif args.export == "-":
            source = _lines(sys.stdin.buffer)
        else:
            source = _lines(stack.enter_context(open(args.export, "rb", buffering=1 << 20)))
        summary = verify.verify_export(source, args.genesis_pin, workers=args.workers,
                                       progress=bar, covered=not args.allow_uncovered,
                                       witnesses=policy)
    if _json_wanted(args):
        sys.stdout.buffer.write(orjson.dumps(summary.to_json()) + b"\n")
        return 0
    rate = summary.size / summary.seconds if summary.seconds else 0.0
    print(f"verified {summary.size:,} entries ({summary.contributions:,} contributions,"
          f" {summary.certificates} authority certificates, {summary.revocations} revocations)"
          f" in {summary.seconds:.1f} s, {rate:,.0f} entries/s")
    print(f"root {summary.root} of size {summary.size}")
    if summary.checkpoints:
        plural = "" if summary.checkpoints == 1 else "s"
        print(f"{summary.checkpoints:,} checkpoint{plural}, each signed by a certified log key,"
              f" consistent with the one before and with the leaves; the last covers size"
              f" {summary.checkpoint_size:,}")
    else:
        print("no checkpoint in the export")
    print("every signature, certificate chain and state rule holds, replayed from an empty"
          " ledger")
    if policy is not None:
        print(f"the last checkpoint is cosigned by {len(summary.cosigners)} trusted witnesses"
              f" (quorum {policy.quorum}): {', '.join(summary.cosigners) or '-'}")
    if summary.uncovered:
        print(f"warning: the last {summary.uncovered:,} entries are verified but no checkpoint"
              " covers them yet: their completeness is not signed", file=sys.stderr)
    return 0


def _verify_source(args: argparse.Namespace) -> None:
    """Settle ``args.url`` (the library to verify, or ``None`` for EXPORT) and
    ``args.genesis_pin``: what was given, else the config home's library and pin."""
    explicit = bool(getattr(args, "global_library", None))
    if args.export and explicit:
        raise UsageError("give an EXPORT file or --library URL (one of them)")
    if args.export and args.entry:
        raise UsageError("--entry and --checkpoint check one revision on a server: give"
                         " --library URL instead of EXPORT")
    home = _home_library()
    args.url = None if args.export else _chosen_library(args) or (home[0] if home else None)
    if not args.export and args.url is None:
        raise UsageError("what to verify? give an EXPORT file or --library URL (no library is"
                         " configured in your config home)")
    if args.genesis_pin is None:
        if home is None or (args.url is not None and args.url != home[0]):
            where = f"{args.url} is not the library of your config home" if home and args.url \
                else "no pin in your config home"
            raise Malformed(f"which genesis? {where}: pass --genesis-pin PIN, the pin the"
                            " library's operator published", "GENESIS_PIN_REQUIRED",
                            library=args.url)
        args.genesis_pin = home[1]
        print(f"verifying against the genesis pin of your config home: {home[1]}",
              file=sys.stderr)
    if not HEX64.match(args.genesis_pin):
        raise UsageError("--genesis-pin is 64 lowercase hex characters")
    if args.entry and not HEX64.match(args.entry):
        home_dir = Home.locate()
        names = home_dir.names(Path(args.names) if args.names else None)
        rev = names.get(args.entry.removeprefix("$"))
        if rev is None:
            raise Malformed(f"--entry {args.entry!r} is neither a revision (64 lowercase hex)"
                            f" nor a name in {args.names or home_dir.names_path}",
                            "BAD_REVISION", value=args.entry[:100])
        args.entry = rev


def _witness_policy(args: argparse.Namespace) -> WitnessPolicy | None:
    """``--witness NAME=VKEY`` … and ``--witness-quorum N``, or None without them."""
    return policy_of(args.witness, args.witness_quorum)


def _verify_entry(args: argparse.Namespace, policy: WitnessPolicy | None) -> int:
    note = Path(args.checkpoint).read_text("utf-8") if args.checkpoint else None
    warn_plain_http(args.url)
    fetch, close = export.http_fetcher(args.url)
    try:
        result = verify.verify_entry(fetch, args.genesis_pin, args.entry, note, policy)
    finally:
        close()
    if _json_wanted(args):
        sys.stdout.buffer.write(orjson.dumps(result.to_json()) + b"\n")
        return 0
    print(f"{result.id} verified: entry {result.sequence} (leaf index {result.sequence - 1}),"
          " included in the checkpoint of"
          f" size {result.checkpoint_size} (root {result.root}) signed by log key"
          f" {result.log_key}")
    if policy is not None:
        print(f"the checkpoint is cosigned by {len(result.cosigners)} trusted witnesses (quorum"
              f" {policy.quorum}): {', '.join(result.cosigners) or '-'}")
    return 0
