"""How ``alexandria serve`` runs and stops its processes.

A server is one main process and its children: the HTTP worker processes (Granian's, started
by ``front_end.py``) and, with ``--workers N`` (N ≥ 2) or ``--writer-process``, one admission
writer process (``writer_service.py``).  The main process supervises them:

- every child dies with the main process: it asks the kernel for a signal when its parent
  dies (Linux ``PR_SET_PDEATHSIG``: SIGKILL for an HTTP worker, SIGTERM for the writer, which
  then closes its database) and also watches its parent's pid, where that call does not exist;
- an HTTP worker that dies is started again (Granian's respawn); one that dies again within
  seconds of its restart stops the server (a crash loop);
- a writer that dies stops the server: every admission would be answered 503 until then;
- SIGTERM or SIGINT, at any moment from the first instant of start-up on, stops every process:
  each is asked to stop, then killed after ``CHILD_STOP_S``; and if the whole stop has not
  ended ``STOP_DEADLINE_S`` after the signal, every remaining child is killed and the main
  process exits;
- ``serve`` returns after a stop it was asked for; after any other stop it raises
  ``ServerProcessDied`` (exit status 1), so a service manager's ``Restart=on-failure`` starts it
  again.

The processes share a private run directory in the temporary directory (the writer's socket,
prometheus-client's multiprocess files), named after the main process's pid: it is removed at
the end, by the writer when the main process was killed, and at the next start when both were.

What the children need to build their part is one ``ServeConfig``, passed to them whole.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from alexandria.errors import Failed
from alexandria.store import query_budget

#: from a stop signal until every process is gone, at most (then SIGKILL)
STOP_DEADLINE_S = 10.0
#: how long a child asked to stop (SIGTERM) has before it is killed
CHILD_STOP_S = 3
#: how often a child looks at its parent's pid (the fallback of PR_SET_PDEATHSIG)
PARENT_POLL_S = 0.5
#: a writer that exits while no stop was asked for is a failure, unless a stop signal reaches
#: the main process within this long (one ``kill -TERM -PGID`` reaches both at once)
STOP_SIGNAL_GRACE_S = 1.0
RUN_DIR_PREFIX = "alexandria-serve-"
#: where earlier versions kept the writer's socket (removed when nobody listens on it)
LEGACY_WRITER_PREFIX = "alexandria-writer-"
#: and made this long ago (its writer may still be opening the library: it listens after)
LEGACY_STALE_S = 3600.0
METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # api/metrics.MULTIPROC_ENV, prometheus-client's name
WRITER_SWITCH_INTERVAL = 0.0003  # seconds, in the writer process only
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ServerProcessDied(Failed):
    """A process of the server stopped without being asked to: the server stopped."""

    default_code = "SERVER_PROCESS_DIED"


class Stopped(BaseException):
    """A stop signal reached the main process during start-up or the writer's stop."""


@dataclass(frozen=True)
class ServeConfig:
    """Everything a process of the server needs to build its part, given to each whole."""

    genesis: str
    db: str
    log_key: str | None = None
    read_db: str | None = None
    witnesses: tuple[str, ...] = ()  # ``--witness NAME=URL+VKEY`` options
    witness_quorum: int = 0
    public_url: str | None = None
    trust_proxy_headers: bool = False
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    dedicated_writer: bool = False
    access_log: bool = False
    #: pages carry ``Server-Timing`` (``serve --server-timing``)
    server_timing: bool = False
    #: each read's time budget in seconds, None for none (``store/query_budget.py``)
    query_timeout_s: float | None = query_budget.DEFAULT_S
    #: how long an admission may wait for the writer (``serve --admission-deadline``; None:
    #: the library's default)
    admission_deadline_s: float | None = None
    #: refusals a client address gets answered at once before its refusals are held
    #: (``serve --refusal-burst``; ``api/guard.py``; None: the guard's default)
    refusal_burst: int | None = None
    #: ``module:function`` that builds a worker's ASGI app from this config
    app: str = "alexandria.api.serve:app_for"
    #: the writer process's socket, once it listens (None: the workers admit themselves)
    writer_socket: str | None = None

    @property
    def shared_writer(self) -> bool:
        """Whether the HTTP workers admit through one writer process."""
        return self.workers > 1 or self.dedicated_writer


def load_app(config: ServeConfig) -> Any:
    """The ASGI app of one HTTP worker (``config.app`` called with ``config``)."""
    module, _, name = config.app.partition(":")
    return getattr(importlib.import_module(module), name)(config)


# --- children die with their parent ----------------------------------------------------------

def die_with_parent(sig: int, parent: int) -> None:
    """Have this process receive ``sig`` when ``parent`` (its parent) is gone: the kernel's
    parent-death signal where there is one, and a thread that watches the parent's pid."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:  # gone before the call above
        os.kill(os.getpid(), sig)
    threading.Thread(target=_watch_parent, args=(parent, sig), name="parent-watch",
                     daemon=True).start()


def parent_gone(parent: int) -> bool:
    """Whether ``parent``, this process's parent, has died or is dying.  A parent killed while
    it has several threads is dying already when the parent-death signal comes (the thread
    that started this process has ended) but ``getppid`` names it until its last thread has
    ended: its main thread is then a zombie."""
    if os.getppid() != parent:
        return True
    try:
        with open(f"/proc/{parent}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):  # no /proc: getppid has the last word
        return False
    return state in ("Z", "X")


def _watch_parent(parent: int, sig: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os.kill(os.getpid(), sig)
    time.sleep(STOP_DEADLINE_S)  # still here: it did not stop on ``sig``
    os.kill(os.getpid(), signal.SIGKILL)


def descendants(pid: int | None = None) -> list[int]:
    """The pids of every process below ``pid`` (this one), children first."""
    found: list[int] = []
    queue = [os.getpid() if pid is None else pid]
    while queue:
        parent = queue.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            if parent == os.getpid():  # no /proc: the children multiprocessing knows
                return [p.pid for p in multiprocessing.active_children() if p.pid]
            continue
        for task in tasks:
            with contextlib.suppress(OSError):
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    children = [int(c) for c in f.read().split()]
                found.extend(children)
                queue.extend(children)
    return found


def forget_dead_workers() -> None:
    """Drop the live gauges of worker processes that were killed (a worker that stops on its
    own drops its own, ``api/metrics.worker_exited``): a restarted worker calls this first."""
    directory = os.environ.get(METRICS_ENV)
    if not directory:
        return
    from prometheus_client import multiprocess

    for path in Path(directory).glob("gauge_live*_*.db"):
        pid = path.stem.rpartition("_")[2]
        if pid.isdigit() and not _alive(int(pid)):
            multiprocess.mark_process_dead(int(pid), directory)  # type: ignore[no-untyped-call]


def kill_descendants() -> None:
    for pid in descendants():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- the run directory -----------------------------------------------------------------------

def _alive(pid: int) -> bool:
    if pid == os.getpid():  # a directory named after us that we did not make: a pid reused
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _listening(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def stale_run_dirs(tmp: Path | None = None) -> list[Path]:
    """This user's run directories whose server is gone (killed before it could remove
    them): named after a pid that no longer runs, or an earlier version's writer directory
    whose socket nobody listens on, made more than an hour ago."""
    tmp = Path(tempfile.gettempdir()) if tmp is None else tmp
    stale = []
    with contextlib.suppress(OSError):
        for entry in tmp.iterdir():
            name = entry.name
            try:
                if entry.is_symlink() or not entry.is_dir() or entry.stat().st_uid != os.getuid():
                    continue
            except OSError:
                continue
            if name.startswith(RUN_DIR_PREFIX):
                pid = name[len(RUN_DIR_PREFIX):].partition("-")[0]
                if pid.isdigit() and not _alive(int(pid)):
                    stale.append(entry)
            elif (name.startswith(LEGACY_WRITER_PREFIX) and not _listening(entry / "writer.sock")
                  and time.time() - entry.stat().st_mtime > LEGACY_STALE_S):
                stale.append(entry)
    return stale


def remove_stale_run_dirs() -> None:
    for stale in stale_run_dirs():
        shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def run_directory() -> Iterator[Path]:
    """A fresh private run directory (mode 0700) for the block."""
    directory = Path(tempfile.mkdtemp(prefix=f"{RUN_DIR_PREFIX}{os.getpid()}-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# --- the supervisor --------------------------------------------------------------------------

class Supervisor:
    """The main process's side: stop signals, the deadline, failures of children."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.failure: str | None = None
        self._raise = True
        self._deadline_started = False
        self._lock = threading.Lock()

    def install_signal_handlers(self) -> None:
        """From now on SIGTERM and SIGINT stop the server; during start-up (and once the
        front end has returned) the first one raises ``Stopped`` in the main thread."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def quiet_signals(self) -> None:
        """Signals only noted from now on (the stop is under way)."""
        self._raise = False
        self.install_signal_handlers()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        first = not self.stopping.is_set()
        self.stop_requested()
        if first and self._raise:
            raise Stopped(signum)

    def stop_requested(self) -> None:
        """A stop began: it must end within ``STOP_DEADLINE_S``."""
        self.stopping.set()
        with self._lock:
            if self._deadline_started:
                return
            self._deadline_started = True
        threading.Thread(target=self._deadline, name="stop-deadline", daemon=True).start()

    def _deadline(self) -> None:
        time.sleep(STOP_DEADLINE_S)
        left = descendants()
        print(f"the server did not stop within {STOP_DEADLINE_S:.0f} s: killing its"
              f" {len(left)} remaining processes", file=sys.stderr, flush=True)
        kill_descendants()
        for directory in _RUN_DIRS:
            shutil.rmtree(directory, ignore_errors=True)
        os._exit(1 if self.failure else 0)

    def fail(self, why: str) -> None:
        """A child stopped on its own: say why, and stop the server (exit status 1)."""
        if self.failure is None:
            self.failure = why
        print(f"{why}: stopping the server", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    # --- the writer process -------------------------------------------------------------------

    @contextlib.contextmanager
    def writer(self, config: ServeConfig, run_dir: Path) -> Iterator[str]:
        """The admission writer process for the block; yields its socket once it listens."""
        socket_path = str(run_dir / "writer.sock")
        process = multiprocessing.get_context("spawn").Process(
            target=writer_main, args=(config, socket_path, os.getpid()),
            name="alexandria-writer",
        )
        ended = threading.Event()
        try:
            process.start()
            await_writer(process, socket_path)
            if not process.is_alive():
                raise ServerProcessDied(
                    f"the admission writer process exited while opening the library"
                    f" ({_status(process.exitcode)})")
            threading.Thread(target=self._watch_writer, args=(process, ended),
                             name="writer-watch", daemon=True).start()
            yield socket_path
        finally:
            ended.set()
            _stop_child(process)

    def _watch_writer(self, process: multiprocessing.process.BaseProcess,
                      ended: threading.Event) -> None:
        process.join()
        if ended.is_set() or self.stopping.wait(STOP_SIGNAL_GRACE_S) or ended.is_set():
            return
        self.fail(f"the admission writer process exited ({_status(process.exitcode)})")


_RUN_DIRS: list[Path] = []  # removed by the deadline too


def _status(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"status {code}"


def _stop_child(process: multiprocessing.process.BaseProcess) -> None:
    """SIGTERM, then SIGKILL after ``CHILD_STOP_S``."""
    if process.pid is None:
        return
    if process.is_alive():
        process.terminate()
        process.join(CHILD_STOP_S)
    if process.is_alive():
        process.kill()
    process.join()


def await_writer(process: multiprocessing.process.BaseProcess, socket_path: str) -> None:
    """Wait until the writer listens: it opens the library first, and opening may migrate an
    earlier layout (``store/schema.py``, ``store/feed.py``: minutes on a large library, in one
    write transaction).  The HTTP workers start only then — opened while a migration holds
    the write lock, they would time out on it and fail to start.  Returns early when the
    writer exits."""
    started = time.monotonic()
    said = False
    while process.is_alive():
        if _listening(Path(socket_path)):
            return
        if not said and time.monotonic() - started > 2.0:
            print("opening the library (an earlier layout is migrated first: on a large"
                  " library this takes minutes)…", file=sys.stderr, flush=True)
            said = True
        time.sleep(0.05)


def writer_main(config: ServeConfig, socket_path: str, parent: int) -> None:
    """The writer process: admissions from the workers, until SIGTERM or its parent is gone
    (then it also removes the run directory: nobody else will)."""
    import asyncio

    die_with_parent(signal.SIGTERM, parent)
    # Ctrl-C reaches the whole process group: the writer stays until the workers have
    # drained their requests and the parent sends SIGTERM
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the writer thread lets go of the GIL at every SQLite call; with the default 5 ms switch
    # interval the event loop, once it has it, keeps it for a whole burst of requests while
    # the writer waits; a shorter interval hands the GIL to the writer sooner
    sys.setswitchinterval(WRITER_SWITCH_INTERVAL)

    async def main() -> None:
        # imported in the writer process only: the main process does not load the library's
        # modules (prometheus-client among them) before it has set up what its children share
        from alexandria.service import writer_metrics
        from alexandria.service.library import load_genesis
        from alexandria.service.writer_service import WriterServer
        from alexandria.store.backends import storage_for

        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        storage = storage_for(config.db, load_genesis(config.genesis))
        writer_metrics.watch(storage, "writer")
        await storage.open()
        server = WriterServer(storage.submit, socket_path, storage.submit_many)
        try:
            await server.start()
            await stop.wait()
        finally:
            await server.close(drain=CHILD_STOP_S / 2)
            await storage.close()

    try:
        _run_loop(main)
    finally:
        if parent_gone(parent):
            shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)


def _run_loop(main: Callable[[], Any]) -> None:
    import asyncio

    try:
        import uvloop
    except ImportError:  # uvicorn[standard] brings it where it builds
        asyncio.run(main())
    else:
        uvloop.run(main())


# --- serving ---------------------------------------------------------------------------------

FrontEnd = Callable[[ServeConfig, Supervisor], None]
"""Runs the HTTP processes of a configuration until a stop (``front_end.run_granian``)."""


def serve(config: ServeConfig, front_end: FrontEnd,
          supervisor: Supervisor | None = None) -> None:
    """Run the server until a stop signal (returns) or an unexpected stop of one of its
    processes (raises ``ServerProcessDied``).  ``supervisor``: one whose signal handlers the
    caller installed earlier, from the start of its own start-up."""
    if supervisor is None:
        supervisor = Supervisor()
        supervisor.install_signal_handlers()
    try:
        remove_stale_run_dirs()  # whatever this server's layout
        with contextlib.ExitStack() as stack:
            if config.shared_writer:
                run_dir = stack.enter_context(run_directory())
                _RUN_DIRS.append(run_dir)
                metrics = run_dir / "metrics"
                metrics.mkdir()
                # every worker's counters, summed (api/metrics.py): prometheus-client reads it
                # when first imported, in each worker
                os.environ[METRICS_ENV] = str(metrics)
                stack.callback(os.environ.pop, METRICS_ENV, None)
                # on PostgreSQL too: every worker could admit directly (the row lock of
                # ``ledger_writes`` serialises writers), but one writer commits larger groups
                # and hands the lock over less often (docs/deployment.md)
                socket_path = stack.enter_context(supervisor.writer(config, run_dir))
                config = replace(config, writer_socket=socket_path)
            front_end(config, supervisor)
            supervisor.quiet_signals()
    except Stopped:
        supervisor.quiet_signals()
    if supervisor.failure is not None:
        raise ServerProcessDied(f"{supervisor.failure}: the server stopped")
