"""``alexandria login URL``: a worker key and its certificate, without passing files around.

As ``gh auth login`` does with a device code: the key is created in the config home, an
enrolment request (public key, actor name, scopes, signed by the key) goes to the library, and
a one-time code is shown.  The operator approves it (``alexandria authority approve CODE``, on
their machine, with their authority key); ``login`` polls until the certificate arrives, checks
it against the pinned genesis and keeps it.  ``--no-wait`` prints the code and returns; running
``login`` again resumes waiting for the same request while it is valid
(``enrolment.json`` in the config home).  ``service/enrolment.py`` describes the request.
"""

from __future__ import annotations

import argparse
import getpass
import os
import time
from typing import TYPE_CHECKING, Any

import orjson

from alexandria.cli.config import Home, LibraryConfig, SetupRequired
from alexandria.cli.participant import command, library_url
from alexandria.cli.session import Session, fetch_genesis
from alexandria.cli.terminal import emit_json, note, say
from alexandria.cli.usage import UsageError
from alexandria.client import Client, Unreachable, check_library_url
from alexandria.core.keys import HEX64
from alexandria.core.timestamps import format_ms, now_ms, parse_ms
from alexandria.core.trust import parse_worker_certificate
from alexandria.errors import AlexandriaError, Malformed, NotFound
from alexandria.files import check_name, read_json, write_json
from alexandria.service.enrolment import signed_bytes
from alexandria.service.operator_dir import parse_scopes

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]

DEFAULT_SCOPES = "publish,comment,vote"


class EnrolmentExpired(SetupRequired):
    default_code = "CODE_EXPIRED"


def register(sub: Sub) -> None:
    p = command(sub, "login", "create your key and ask a library to approve it", cmd_login,
                __doc__.split("\n\n")[1] if __doc__ else None, library=False,
                examples="  alexandria login http://127.0.0.1:8080 --name alice\n"
                "  CODE=$(alexandria login URL --no-wait)   # then, once approved:\n"
                "  alexandria login URL")
    p.add_argument("url", metavar="URL", nargs="?",
                   help="the library (default: $ALEXANDRIA_LIBRARY, else the one you use)")
    p.add_argument("--name", help="the actor name you ask for (default: your user name)")
    p.add_argument("--scopes", default=DEFAULT_SCOPES,
                   help="what you ask to do: publish, comment, vote, curate, or all")
    p.add_argument("--genesis", metavar="PIN",
                   help="the library's genesis pin, obtained out of band (without it, the"
                   " library's own genesis is pinned on first use)")
    p.add_argument("--no-wait", action="store_true",
                   help="print the code and return; run `alexandria login` again to finish")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="stop waiting after this long (default: until the code expires)")


def _poll_seconds() -> float:
    raw = os.environ.get("ALEXANDRIA_POLL_SECONDS")
    return float(raw) if raw and raw.replace(".", "", 1).isdigit() else 2.0


def cmd_login(args: argparse.Namespace) -> int:
    home = Home.locate()
    known = home.library_or_none()
    chosen = args.url or library_url(args) or (known.url if known else None)
    if not chosen:
        raise UsageError("which library? `alexandria login URL`")
    url = check_library_url(chosen)
    if args.genesis is not None and not HEX64.match(args.genesis):
        raise Malformed("--genesis is a 64-hex pin", "BAD_PIN")
    name = check_name(args.name or _default_name())
    scopes = parse_scopes([args.scopes])
    pin = args.genesis or (known.pin if known and known.url == url else None)
    with Client(url) as client:
        genesis = fetch_genesis(client, pin)
        if pin is None:
            note(f"pinned genesis {genesis.pin} as the library served it (trust on first use):"
                 " compare it with the pin the operator published")
        key, created = home.create_key()
        if known is None or known.url != url or known.pin != genesis.pin:
            home.save_library(LibraryConfig(url, genesis.pin))
            home.save_genesis(dict(genesis.document))
        if created:
            note(f"created worker key {home.key_path} (mode 0600)")
        current = _current_certificate(home)
        if current is not None:
            return _done(args, current, "already logged in")
        request = _open_request(home, url, key.public_hex)
        if request is None:
            request = _request(client, home, url, genesis.pin, key, name, scopes)
            if not args.json:
                note(f"one-time code: {request['code']}  (valid until {request['expires_at']})")
                note(f"give it to the operator of {url}; they run:"
                     f" alexandria authority approve {request['code']}")
        else:
            note(f"waiting for the request made earlier: code {request['code']}")
        if args.no_wait:
            if args.json:
                emit_json(request)
            else:
                say(request["code"])
                note("run `alexandria login` again once it is approved")
            return 0
        cert = _wait(client, home, request, key.public_hex, args.timeout)
    home.save_certificate(cert)
    (home.root / "enrolment.json").unlink(missing_ok=True)
    return _done(args, parse_worker_certificate(cert, genesis), "logged in")


def _default_name() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    return "".join(c for c in user if c.isalnum() or c in "_.-")[:64] or "participant"


def _current_certificate(home: Home) -> Any:
    """The certificate already in the home, when it is for this key, chains to the pinned
    genesis and is valid now."""
    if not home.certificate_path.exists():
        return None
    session = Session(home)
    try:
        cert = session.certificate()
    except AlexandriaError:
        return None
    finally:
        session.close()
    return cert if cert.valid_at(now_ms()) else None


def _open_request(home: Home, url: str, worker: str) -> dict[str, Any] | None:
    path = home.root / "enrolment.json"
    if not path.exists():
        return None
    saved = read_json(path)
    expires = parse_ms(str(saved.get("expires_at", ""))) if isinstance(saved, dict) else None
    if not isinstance(saved, dict) or saved.get("library") != url \
            or saved.get("worker") != worker or expires is None or expires < now_ms():
        path.unlink(missing_ok=True)
        return None
    return saved


def _request(client: Client, home: Home, url: str, pin: str, key: Any, name: str,
             scopes: list[str]) -> dict[str, Any]:
    worker = key.public_hex
    body = {"worker": worker, "name": name, "scopes": sorted(scopes),
            "proof": key.sign(signed_bytes(pin, worker, name, scopes))}
    answer = _post_patiently(client, orjson.dumps(body))
    request = {"library": url, "worker": worker, "name": name, "code": answer["code"],
               "expires_at": answer["expires_at"]}
    write_json(home.root / "enrolment.json", request)
    return request


#: a library that asks to retry within this many seconds (it is taking many requests at once)
#: is asked again, up to RETRIES times; a longer wait is the user's to choose
PATIENCE_SECONDS = 5
RETRIES = 6


def _post_patiently(client: Client, body: bytes) -> Any:
    """``POST /api/enrolments``, asked again when the library says to retry in a moment."""
    attempt = 0
    while True:
        try:
            return client.post("/api/enrolments", body).json()
        except Unreachable as exc:
            wait = exc.details.get("retry_after")
            if exc.details.get("status") != 429 or not isinstance(wait, int) \
                    or wait > PATIENCE_SECONDS or attempt == RETRIES:
                raise
            attempt += 1
            note(f"the library is busy: asking again in {wait} s")
            time.sleep(wait)


def _wait(client: Client, home: Home, request: dict[str, Any], worker: str,
          timeout: float | None) -> dict[str, Any]:
    expires = parse_ms(request["expires_at"]) or 0
    deadline = time.monotonic() + timeout if timeout is not None else None
    note(f"waiting for the operator to approve {request['code']}… (Ctrl-C stops; `alexandria"
         " login` resumes)")
    while True:
        try:
            state = client.get_json(f"/api/enrolments/{request['code']}", worker=worker)
        except NotFound:
            (home.root / "enrolment.json").unlink(missing_ok=True)
            raise EnrolmentExpired(
                f"the request {request['code']} expired before it was approved: run"
                " `alexandria login` again for a new code", enrolment=request["code"]) from None
        if state.get("status") == "approved" and isinstance(state.get("certificate"), dict):
            cert: dict[str, Any] = state["certificate"]
            return cert
        if now_ms() > expires or (deadline is not None and time.monotonic() > deadline):
            raise EnrolmentExpired(
                f"not approved yet (code {request['code']}, valid until"
                f" {format_ms(expires)}): run `alexandria login` again to keep waiting",
                "NOT_APPROVED_YET", enrolment=request["code"])
        time.sleep(_poll_seconds())


def _done(args: argparse.Namespace, cert: Any, verb: str) -> int:
    if args.json:
        emit_json({"status": verb.replace(" ", "_"), "actor": cert.actor, "worker": cert.worker,
                   "scopes": list(cert.scopes), "not_after": format_ms(cert.not_after)})
        return 0
    say(cert.actor)
    note(f"{verb}: actor {cert.actor}, scopes {', '.join(cert.scopes)}, valid until"
         f" {format_ms(cert.not_after)}")
    return 0

