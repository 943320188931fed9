"""A warm start for ``alexandria publish``: a fork server, as Mercurial's ``chg`` is for ``hg``.

Why: a fresh Python that imports what one publish needs (cryptography, jsonschema-rs, orjson,
argparse, dataclasses…) spends ~70 ms of CPU before the first line of ``publish`` runs, nearly
all of it in those libraries' own imports (bench/cli.py, docs/cli.md "Speed").  The checks,
the signature and the durable pending file take a few milliseconds.

How: the first ``publish`` runs as always, and starts in the background a *warm process* that
imports the publish path once, compiles the content schema's validator and then waits on a Unix
socket.  A later ``publish`` connects, hands over its standard input, output and error (file
descriptors, ``SCM_RIGHTS``), arguments, working directory and environment; the warm process
forks, and the fork runs exactly ``alexandria.cli.main(argv)`` on them — every check, the
signing and the pending file as in a cold start, with the caller's environment and directory —
then sends back the exit status.  The caller forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to
the fork.

What it does not change: each command is a fresh fork of a process that never reads a key, a
configuration or a name file (nothing of one command is left for the next); the warm process
holds imported code only.  It listens in a directory only its user can enter
(``$XDG_RUNTIME_DIR/alexandria``, else ``/tmp/alexandria-UID``, mode 0700, checked) and serves
only its own user (``SO_PEERCRED``).  One warm process per user and install: its socket's name
is a hash of the interpreter and of the package's directory, and a request from anything else
is refused, as is every request once a module it imported changed on disk (an upgrade, an
edit): the command then runs cold and a fresh warm process starts.  It exits after
``IDLE_SECONDS`` without a request.

``ALEXANDRIA_WARM=0`` turns it off (every command starts cold); ``ALEXANDRIA_WARM_IDLE`` sets
the idle time in seconds.  Only ``main()`` as a program uses it (``alexandria``, ``python -m
alexandria.cli``), never ``main(argv)`` called from Python.
"""

from __future__ import annotations

import os
import socket
import sys

from alexandria import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (cli/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

#: modules the warm process imports before it serves (the publish path)
PRELOAD = ("alexandria.cli.parser", "alexandria.cli.publish", "alexandria.core.schema")
IDLE_SECONDS = 600.0
#: how long a caller waits for the warm process to take its command (it forks at once)
ANSWER_SECONDS = 10.0
#: True in a fork that runs a caller's command (``alexandria -v`` says so)
SERVING = False
#: the request's header: 8 bytes of length, then that many bytes of ``marshal`` data
_HEADER = 8
#: the largest request (arguments and environment) a warm process reads
MAX_REQUEST = 1024 * 1024
#: the status a warm process sends instead of a fork's pid when it will not serve
REFUSED = 0
_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


def identity() -> str:
    """What a client and its warm process must share: the interpreter, the package's
    directory and the version."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return f"{sys.executable}\0{package}\0{__version__}"


def _fnv1a(text: str) -> str:
    """A short stable hash for the socket's name (not a security measure: the directory is
    private and the request carries the full ``identity``); ``hashlib`` would cost the
    client an import."""
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def socket_dir() -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "alexandria")
    return f"/tmp/alexandria-{os.getuid()}"


def private_dir(create: bool) -> str | None:
    """The socket directory when it is its user's alone (created 0700 when ``create``), else
    ``None``: a directory someone else could enter or replace is never used."""
    import stat

    path = socket_dir()
    for attempt in (1, 2):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not create or attempt == 2:
                return None
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            except OSError:
                return None
            continue
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() \
                and not st.st_mode & 0o077:
            return path
        return None
    return None  # pragma: no cover


def socket_path(create: bool = False) -> str | None:
    directory = private_dir(create)
    if directory is None:
        return None
    path = os.path.join(directory, f"warm-{_fnv1a(identity())}.sock")
    return path if len(path.encode()) < 100 else None  # AF_UNIX paths are short


def enabled() -> bool:
    return os.environ.get("ALEXANDRIA_WARM", "1") != "0" and sys.platform.startswith("linux") \
        and hasattr(socket, "send_fds")


# --- the caller ---------------------------------------------------------------------------------


def run(argv: Sequence[str]) -> int | None:
    """The exit status of ``argv`` run by the warm process; ``None`` when there is none to run
    it (one is then started for the next command, and the caller runs this one itself)."""
    if not enabled():
        return None
    path = socket_path()
    if path is None:
        start()
        return None
    import marshal

    try:
        request = marshal.dumps((identity(), list(argv), os.getcwd(), dict(os.environ)))
    except (OSError, ValueError):  # no working directory: a cold start says what fails
        return None
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.settimeout(ANSWER_SECONDS)
        client.connect(path)
        socket.send_fds(client, [len(request).to_bytes(_HEADER, "big")], [0, 1, 2])
        client.sendall(request)
    except OSError:  # none listening (a dead one's socket), or it left: nothing ran
        client.close()
        start()
        return None
    try:
        pid = _receive_int(client)
        client.settimeout(None)
    except KeyboardInterrupt:
        client.close()
        sys.stderr.write("alexandria: interrupted\n")
        return 130
    except OSError as exc:
        # sent or not, a fork may run it: running it here too could sign it twice
        client.close()
        sys.stderr.write(f"alexandria: the warm process did not answer ({exc}); run the"
                         " command again, or with ALEXANDRIA_WARM=0\n")
        return 1
    if pid is None or pid == REFUSED:  # stale or not ours: it is going away, nothing ran
        client.close()
        start()
        return None
    return _wait(client, pid)


def _receive_int(sock: socket.socket) -> int | None:
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    return int.from_bytes(data, "big", signed=True)


def _wait(client: socket.socket, pid: int) -> int:
    """The fork's exit status, forwarding the signals a terminal sends to its foreground."""
    import signal

    forwarded: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        forwarded.append(signum)
        try:  # noqa: SIM105 (contextlib is one import more on the fast path)
            os.kill(pid, signum)
        except OSError:
            pass

    for name in _FORWARDED:
        signum = getattr(signal, name)
        # a signal this caller ignores (a background job's SIGINT, nohup's SIGHUP) is not the
        # command's either: it stays ignored, as it would be in a cold start
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, forward)
    try:
        while True:
            try:
                status = _receive_int(client)
                break
            except InterruptedError:  # pragma: no cover (PEP 475 retries recv)
                continue
    except OSError:
        status = None
    finally:
        client.close()
    if status is None and forwarded:  # killed by what the caller was sent, as a shell says it
        return 128 + forwarded[-1]
    if status is None:
        sys.stderr.write("alexandria: the command stopped before it finished (its warm"
                         " process ended); `alexandria pending` shows what was kept\n")
        return 1
    return status


def start() -> None:
    """A warm process in the background, in its own session, its output to /dev/null; it
    starts in ``/`` so that no ``alexandria`` directory under the caller's is imported."""
    path = socket_path(create=True)
    if path is None:
        return
    code = ("import os, sys; os.chdir('/'); sys.path[:] = [p for p in sys.path if p];"
            " from alexandria.cli.warm import serve; serve(sys.argv[1])")
    null = os.devnull
    try:  # noqa: SIM105 (as above)
        os.posix_spawn(sys.executable, [sys.executable, "-c", code, path], dict(os.environ),
                       file_actions=[(os.POSIX_SPAWN_OPEN, 0, null, os.O_RDONLY, 0),
                                     (os.POSIX_SPAWN_OPEN, 1, null, os.O_WRONLY, 0),
                                     (os.POSIX_SPAWN_OPEN, 2, null, os.O_WRONLY, 0)],
                       setsid=True)
    except OSError:
        pass


def stop_all(runtime: str) -> None:
    """SIGTERM every warm process listening under the runtime directory ``runtime`` (its
    command line names its socket there): what a bench or a test suite that gave its commands
    a runtime directory of their own runs when it ends."""
    import signal

    marker = runtime.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker in cmdline and b"alexandria.cli.warm import serve" in cmdline:
            try:  # noqa: SIM105 (contextlib is not imported on the publish path)
                os.kill(int(name), signal.SIGTERM)
            except ProcessLookupError:
                pass


# --- the warm process ---------------------------------------------------------------------------


def _snapshot() -> dict[str, int]:
    """The modification time of every module file of this package imported so far."""
    found: dict[str, int] = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if (name == "alexandria" or name.startswith("alexandria.")) and path:
            try:
                found[path] = os.stat(path).st_mtime_ns
            except OSError:
                found[path] = -1
    return found


def _changed(snapshot: dict[str, int]) -> bool:
    for path, mtime in snapshot.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return True
        except OSError:
            return True
    return False


def serve(path: str) -> None:
    """Import the publish path, listen on ``path`` and fork a child per request until idle."""
    import importlib
    import signal

    for name in PRELOAD:
        importlib.import_module(name)
    from alexandria.core.schema import is_valid_fast

    is_valid_fast({})  # compiles the content schema's validator once, for every fork
    snapshot = _snapshot()
    own = identity()
    try:
        idle = float(os.environ.get("ALEXANDRIA_WARM_IDLE", IDLE_SECONDS))
    except ValueError:
        idle = IDLE_SECONDS
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return  # another warm process serves already (two cold starts at once)
    except OSError:
        pass
    finally:
        probe.close()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    temporary = f"{path}.{os.getpid()}"
    try:
        listener.bind(temporary)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)  # a stale socket of a dead process is replaced at once
    except OSError:
        listener.close()
        return
    listener.listen(16)
    listener.settimeout(idle)
    inode = os.stat(path).st_ino
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the kernel
    signal.signal(signal.SIGTERM, _leave)  # kill PID: the socket goes too
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                return
            with conn:
                if not _serve_one(conn, listener, own, snapshot):
                    return
    finally:
        listener.close()
        try:
            if os.stat(path).st_ino == inode:  # still ours: no newer warm process took it
                os.unlink(path)
        except OSError:
            pass


def _leave(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)


def _serve_one(conn: socket.socket, listener: socket.socket, own: str,
               snapshot: dict[str, int]) -> bool:
    """One request: refused (and False: stop serving) when stale, else forked.  True to go
    on serving."""
    import marshal
    import struct

    fds: list[int] = []
    try:
        conn.settimeout(10)
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                  struct.calcsize("3i")))[1]
        if uid != os.getuid():
            return True
        header, fds, _flags, _addr = socket.recv_fds(conn, _HEADER, 3)
        length = int.from_bytes(header, "big") if len(header) == _HEADER else -1
        if len(fds) != 3 or not 0 < length <= MAX_REQUEST:
            return True
        data = b""
        while len(data) < length:
            chunk = conn.recv(length - len(data))
            if not chunk:
                return True
            data += chunk
        ident, argv, cwd, env = marshal.loads(data)
        if ident != own or _changed(snapshot):
            conn.sendall(REFUSED.to_bytes(4, "big", signed=True))
            return False
        pid = os.fork()
        if pid == 0:
            _child(conn, listener, fds, argv, cwd, env)  # never returns
        return True
    except (OSError, ValueError, EOFError, TypeError):
        return True
    finally:
        for fd in fds:
            os.close(fd)


def _child(conn: socket.socket, listener: socket.socket, fds: list[int], argv: list[str],
           cwd: str, env: dict[str, str]) -> None:
    """Become the caller's command: its standard streams, directory and environment; run it;
    send its exit status."""
    import signal

    global SERVING
    SERVING = True
    status = 1
    try:
        conn.settimeout(None)
        # first of all: the caller forwards signals to this pid and then waits for the status
        conn.sendall(os.getpid().to_bytes(4, "big", signed=True))
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # commands wait for their own children
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # the caller forwards SIGINT only when it does not ignore it; whatever the warm
        # process inherited (started from a background job, it ignores SIGINT), a forwarded
        # one interrupts the command as Ctrl-C interrupts a cold start
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        fds.clear()
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.stdout.reconfigure(line_buffering=sys.stdout.isatty())  # type: ignore[union-attr]
        from alexandria.cli import main, terminal

        terminal.restart_clock()

        try:
            status = main(argv)
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                status = exc.code or 0
            else:
                sys.stderr.write(f"{exc.code}\n")
                status = 1
        except KeyboardInterrupt:
            sys.stderr.write("alexandria: interrupted\n")
            status = 130
    except BaseException:  # the command's own errors were reported by main(); this is ours
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            pass
        try:
            conn.sendall(int(status).to_bytes(4, "big", signed=True))
        finally:
            os._exit(0)
