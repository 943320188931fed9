"""The HTTP front end of ``alexandria serve``: Granian's worker processes, under the
supervisor (``supervisor.py``); uvicorn only for bench/'s comparisons.

What a stranger's connection may cost the public server (docs/deployment.md).  Granian's
HTTP/1 reads a request head into a buffer of at most HEAD_BUFFER_BYTES (a head that fills it
unfinished is answered 431 and closed; the buffer grows by whole reads, so a head sent in one
piece can pass it, and the app refuses every head beyond the same size: ``api/guard.py``) and
closes a connection whose head has not arrived HEAD_TIMEOUT_MS
after it opened or after its previous answer: a silent, a trickling or an idle keep-alive
connection.  A body has ``api/http.BODY_TIMEOUT_S`` to arrive.  Each worker serves at most
MAX_CONNECTIONS connections at once (Granian's "backpressure" counts connections, not
requests); the kernel queues up to BACKLOG more, which wait for a slot: a flood of silent
connections beyond the limit delays newcomers by at most HEAD_TIMEOUT_MS.  The soft limit on
open files is raised to FILE_LIMIT so the connections, not the descriptors, run out first.
"""

from __future__ import annotations

import functools
import os
import resource
import signal
import sys
from dataclasses import asdict
from typing import Any

import orjson

from alexandria.service.supervisor import (
    CHILD_STOP_S,
    FrontEnd,
    ServeConfig,
    Supervisor,
    die_with_parent,
    forget_dead_workers,
    load_app,
)

HEAD_BUFFER_BYTES = 65_536
HEAD_TIMEOUT_MS = 10_000
MAX_CONNECTIONS = 2048
BACKLOG = 2048
FILE_LIMIT = 8192
WORKER_SWITCH_INTERVAL = 0.0005  # seconds, in the HTTP worker processes
#: Granian's crash-loop rule: a worker that dies again this soon after its restart stops the
#: server (granian/server/common.py, ``_serve_loop``)
CRASH_LOOP_S = 5.5
# uvicorn bounds neither head size (httptools) nor head time: not for a public server
_UVICORN: dict[str, Any] = {"log_level": "warning", "server_header": False, "date_header": False,
                            "access_log": False, "proxy_headers": False}
#: uvicorn's worker processes import their app by name: the config travels in the environment
CONFIG_ENV = "ALEXANDRIA_SERVE_CONFIG"
#: Granian's own messages (a worker's unexpected exit, its restart) go to standard error with
#: every other diagnostic of ``serve``; its access log, when asked for, stays on standard output
_GRANIAN_HANDLERS = {"handlers": {
    "console": {"formatter": "generic", "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr"},
    "access": {"formatter": "access", "class": "logging.StreamHandler",
               "stream": "ext://sys.stdout"},
}}


def raise_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FILE_LIMIT if hard == resource.RLIM_INFINITY else min(FILE_LIMIT, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def granian_worker(parent: int, *args: Any, **kwargs: Any) -> None:
    """One Granian HTTP worker process: Granian's own ASGI worker, killed with its parent.

    The worker is forked from the main process and inherits its Python signal handlers,
    Granian's main-process ones among them, which only set a flag: a SIGTERM arriving while
    the worker builds its app would be swallowed and the worker would serve on, unstoppable
    but by SIGKILL.  Until Granian installs the worker's own handlers, SIGTERM ends it."""
    from granian.server.mp import MPServer

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the main process stops us
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    # the event loop answers ordinary requests while threads do the heavy work (/mcp's checks,
    # pages rendered off the loop): with the default 5 ms switch interval a thread that has the
    # GIL keeps the loop waiting up to 5 ms at every hand-over
    sys.setswitchinterval(WORKER_SWITCH_INTERVAL)
    die_with_parent(signal.SIGKILL, parent)
    forget_dead_workers()
    MPServer._spawn_asgi_lifespan_worker(*args, **kwargs)


def run_granian(config: ServeConfig, supervisor: Supervisor) -> None:
    """Granian's main process loop, here, until a stop; its workers restarted when they die."""
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings
    from granian.log import LogLevels
    from granian.server.mp import MPServer

    class Server(MPServer):
        def signal_handler_interrupt(self, *args: Any, **kwargs: Any) -> None:
            supervisor.stop_requested()
            super().signal_handler_interrupt(*args, **kwargs)  # type: ignore[no-untyped-call]

    raise_file_limit()
    server = Server(
        config.app, factory=True, address=config.host, port=config.port,
        interface=Interfaces.ASGI, workers=config.workers, http=HTTPModes.http1,
        websockets=False, loop=Loops.auto, backlog=BACKLOG, backpressure=MAX_CONNECTIONS,
        http1_settings=HTTP1Settings(header_read_timeout=HEAD_TIMEOUT_MS,
                                     max_buffer_size=HEAD_BUFFER_BYTES),
        log_level=LogLevels.warning, log_dictconfig=_GRANIAN_HANDLERS,
        log_access=config.access_log,
        respawn_failed_workers=True, workers_kill_timeout=CHILD_STOP_S,
    )
    try:
        server.serve(spawn_target=functools.partial(granian_worker, os.getpid()),
                     target_loader=functools.partial(load_app, config), wrap_loader=False)
    except SystemExit as exc:  # Granian's exit after a crash loop (or a worker's own stop)
        if exc.code and not supervisor.stopping.is_set():
            supervisor.failure = (f"an HTTP worker process died again within {CRASH_LOOP_S} s"
                                  " of its restart")


def run_uvicorn(config: ServeConfig) -> None:
    import uvicorn

    options = {**_UVICORN, "access_log": config.access_log}
    if config.access_log:
        options["log_level"] = "info"
    if config.workers > 1:
        os.environ[CONFIG_ENV] = orjson.dumps(asdict(config)).decode()
        uvicorn.run("alexandria.service.front_end:app_from_env", factory=True,
                    workers=config.workers, host=config.host, port=config.port, **options)
    else:
        uvicorn.run(load_app(config), host=config.host, port=config.port, **options)


def runner(name: str) -> FrontEnd:
    """The front end ``name`` (``granian``, or ``uvicorn`` for bench/) as
    ``supervisor.serve`` runs it."""
    if name == "granian":
        return run_granian
    return lambda config, _supervisor: run_uvicorn(config)


def app_from_env() -> Any:
    """The app of one of uvicorn's worker processes."""
    fields = orjson.loads(os.environ[CONFIG_ENV])
    fields["witnesses"] = tuple(fields["witnesses"])
    return load_app(ServeConfig(**fields))
